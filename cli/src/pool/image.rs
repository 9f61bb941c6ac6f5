//! Images, built offline through the Engine API from an in-memory tar: the runner image is
//! `FROM scratch` + this very (static) executable, tagged by version and binary hash and reused
//! while unchanged; an agent with `runtime.image` gets that base plus the executable.

use std::collections::HashMap;

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::query_parameters::{BuildImageOptionsBuilder, CreateImageOptionsBuilder};
use futures_util::StreamExt as _;
use sha2::{Digest, Sha256};

use crate::docker::is_not_found;

/// A built image.
#[derive(Clone, Debug)]
pub(crate) struct Image {
    /// The tag.
    pub(crate) tag: String,
    /// The image ID (part of the config hash).
    pub(crate) id: String,
}

/// The executable and its hash.
pub(crate) struct Binary {
    bytes: Vec<u8>,
    hash: String,
}

/// Reads this process's executable.
pub(crate) fn this_binary() -> anyhow::Result<Binary> {
    let path = std::env::current_exe().context("cannot find the ninetrix executable")?;
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes
        .windows(b"/ld-linux".len())
        .take(4096)
        .any(|w| w == b"/ld-linux")
    {
        bail!(
            "{} is dynamically linked, so it cannot run in a FROM scratch image; build it with this repository's \
             .cargo/config.toml (plain `cargo build`), which links statically",
            path.display()
        );
    }
    let hash: String = Sha256::digest(&bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Binary { bytes, hash })
}

fn tar_with(dockerfile: &str, binary: &Binary) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8], mode: u32| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, name, data)
    };
    add("Dockerfile", dockerfile.as_bytes(), 0o644)?;
    add("ninetrix", &binary.bytes, 0o755)?;
    add(SKELETON, &skeleton()?, 0o644)?;
    Ok(tar.into_inner()?)
}

/// The build context's archive of the directories every image gets (`ADD`ed at `/`, which keeps
/// their modes): the mount points of the workspace and the pool's health volume, world-writable
/// with the sticky bit like `/tmp`, so a volume Docker creates there copies that mode and any
/// `security.user` can write it; `/tmp` (a tmpfs at run time); and `/run/secrets`.
const SKELETON: &str = "skeleton.tar";

fn skeleton() -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (dir, mode) in [
        ("workspace/", 0o1777),
        ("tmp/", 0o1777),
        ("run/", 0o755),
        ("run/secrets/", 0o755),
        ("run/ninetrix/", 0o755),
        ("run/ninetrix/pool/", 0o1777),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, dir, std::io::empty())?;
    }
    tar.into_inner()
}

async fn inspect(docker: &Docker, tag: &str) -> anyhow::Result<Option<String>> {
    match docker.inspect_image(tag).await {
        Ok(img) => Ok(img.id),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot inspect image {tag}")),
    }
}

async fn build(
    docker: &Docker,
    tag: &str,
    dockerfile: &str,
    binary: &Binary,
) -> anyhow::Result<String> {
    let labels: HashMap<&str, &str> = [(crate::objects::VERSION, crate::objects::VERSION_VALUE)]
        .into_iter()
        .collect();
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .labels(&labels)
        .build();
    let tar = tar_with(dockerfile, binary)?;
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(tar.into())));
    while let Some(item) = stream.next().await {
        let info = item.with_context(|| format!("building image {tag} failed"))?;
        if let Some(detail) = info.error_detail {
            bail!(
                "building image {tag} failed: {}",
                detail.message.unwrap_or_default()
            );
        }
    }
    inspect(docker, tag)
        .await?
        .with_context(|| format!("image {tag} is missing after its build"))
}

/// The runner image's Dockerfile. No HEALTHCHECK: the runners' health is read on demand from
/// the pool's health volume (pool/health.rs), and containers are created with the healthcheck
/// off, so a base image's own does not run either.
fn runner_dockerfile() -> String {
    format!("FROM scratch\nADD {SKELETON} /\nCOPY ninetrix /ninetrix\nENTRYPOINT [\"/ninetrix\"]\n")
}

/// An agent image's Dockerfile: `base` plus the binary.
fn agent_dockerfile(base: &str) -> String {
    format!("FROM {base}\nADD {SKELETON} /\nCOPY ninetrix /ninetrix\nENTRYPOINT [\"/ninetrix\"]\n")
}

/// The runner image's tag: version and binary hash.
pub(crate) fn runner_tag(binary: &Binary) -> String {
    format!(
        "ninetrix/runner:{}-{}",
        env!("CARGO_PKG_VERSION"),
        binary.hash
    )
}

/// An agent image's tag: version and a digest of its base and the binary.
pub(crate) fn agent_tag(base: &str, binary: &Binary) -> String {
    let digest: String = Sha256::digest(format!("{base}\n{}", binary.hash))
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("ninetrix/agent:{}-{digest}", env!("CARGO_PKG_VERSION"))
}

/// The image with this tag if it exists, without building or pulling anything (`up --dry-run`).
pub(crate) async fn existing(docker: &Docker, tag: &str) -> anyhow::Result<Option<Image>> {
    Ok(inspect(docker, tag).await?.map(|id| Image {
        tag: tag.to_string(),
        id,
    }))
}

/// The runner image, built if this binary has not been built into one yet.
pub(crate) async fn runner_image(
    docker: &Docker,
    binary: &Binary,
) -> anyhow::Result<(Image, bool)> {
    let tag = runner_tag(binary);
    if let Some(id) = inspect(docker, &tag).await? {
        return Ok((Image { tag, id }, false));
    }
    let id = build(docker, &tag, &runner_dockerfile(), binary).await?;
    Ok((Image { tag, id }, true))
}

/// Makes sure `image` (named by the agentfile's key `key`) is in the engine: pulled when it is
/// missing; offline that fails with an error naming the image and the key.
pub(crate) async fn ensure_local(docker: &Docker, image: &str, key: &str) -> anyhow::Result<()> {
    if inspect(docker, image).await?.is_some() {
        return Ok(());
    }
    let (repo, tag) = image
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .unwrap_or((image, "latest"));
    let options = CreateImageOptionsBuilder::default()
        .from_image(repo)
        .tag(tag)
        .build();
    let mut pull = docker.create_image(Some(options), None, None);
    let mut failure = None;
    while let Some(item) = pull.next().await {
        if let Err(e) = item {
            failure = Some(e.to_string());
            break;
        }
    }
    if let Some(why) = failure.or(inspect(docker, image)
        .await?
        .is_none()
        .then(|| "the pull did not produce it".to_string()))
    {
        bail!(
            "the image {image} ({key}) is not available locally and could not be pulled ({why}); load it first (`docker pull {image}` where a registry is reachable, or `docker load`)"
        );
    }
    Ok(())
}

/// An agent image: `base` plus this binary. A base missing locally is pulled; offline that fails
/// with an error naming the image.
pub(crate) async fn agent_image(
    docker: &Docker,
    base: &str,
    binary: &Binary,
) -> anyhow::Result<Image> {
    ensure_local(docker, base, "runtime.image").await?;
    let tag = agent_tag(base, binary);
    if let Some(id) = inspect(docker, &tag).await? {
        return Ok(Image { tag, id });
    }
    let id = build(docker, &tag, &agent_dockerfile(base), binary).await?;
    Ok(Image { tag, id })
}
