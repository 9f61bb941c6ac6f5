//! Kubernetes manifests for a pool (`ninetrix k8s render`, issue 19): [`render()`] turns a resolved
//! agentfile into Kubernetes objects, a pure function of the agentfile and the options; the
//! command (`crate::commands::k8s`) writes them out. See docs/kubernetes.md.

pub(crate) mod render;

pub(crate) use render::{
    RenderOptions, check_names, not_rendered, render, secret_commands, to_documents,
};
