//! A pool's Docker objects, found by its label: its containers, its networks (found, created
//! once, duplicates repaired with [`choose_network`]), and the secrets uploaded into a created
//! container.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use bollard::Docker;
use bollard::models::{ContainerSummary, NetworkCreateRequest, NetworkDisconnectRequest};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptions, UploadToContainerOptionsBuilder,
};

use crate::docker::{NetworkCandidate, choose_network, is_not_found, remove_network, short_id};
use crate::objects::ROLE;

/// The pool's network, found by label: its ID and name, plus what was repaired on the way.
#[derive(Clone, Debug)]
pub(crate) struct PoolNetwork {
    /// The ID every later call uses (a name can be ambiguous).
    pub(crate) id: String,
    /// The name, for messages.
    pub(crate) name: String,
    /// Whether this call created it.
    pub(crate) created: bool,
    /// One line per duplicate removed, or left because it could not be removed (never fatal).
    pub(crate) repairs: Vec<String>,
}

fn bollard_date(d: Option<&bollard::models::BollardDate>) -> String {
    d.map(ToString::to_string).unwrap_or_default()
}

/// Every network labelled with the pool (duplicates included), with their attached containers.
pub(crate) async fn pool_networks(
    docker: &Docker,
    pool: &str,
) -> anyhow::Result<Vec<NetworkCandidate>> {
    let filters: HashMap<String, Vec<String>> = [(
        "label".to_string(),
        vec![format!("{}={pool}", crate::objects::POOL)],
    )]
    .into();
    let listed = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .context("cannot list networks")?;
    let mut out = Vec::new();
    for n in listed {
        let Some(id) = n.id else { continue };
        // The listing does not carry the endpoints; inspect says how many containers use it.
        let endpoints: Vec<String> = match docker.inspect_network(&id, None).await {
            Ok(i) => i
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(|(cid, ep)| ep.name.unwrap_or(cid))
                .collect(),
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot inspect network {id}")),
        };
        out.push(NetworkCandidate {
            id,
            name: n.name.unwrap_or_default(),
            created: bollard_date(n.created.as_ref()),
            containers: endpoints.len(),
            endpoints,
        });
    }
    Ok(out)
}

/// The pool's network (a bridge labelled with the pool), found by label and created only if
/// none exists. Duplicates are repaired: the one [`choose_network`] keeps stays, the others are
/// removed — after detaching the local API (`api`) — unless another container still uses one,
/// which is then left and reported in `repairs` (never fatal). Callers hold the pool lock, so two
/// ninetrix commands never create it twice.
pub(crate) async fn ensure_network(
    docker: &Docker,
    pool: &str,
    api: Option<&str>,
) -> anyhow::Result<PoolNetwork> {
    // The pool network and its duplicates share its name; the agents' internal egress networks
    // (pool/egress.rs) carry the pool label too but are not candidates.
    let name = crate::objects::network_name(pool);
    let found: Vec<_> = pool_networks(docker, pool)
        .await?
        .into_iter()
        .filter(|n| n.name == name)
        .collect();
    if let Some((keep, rest)) = choose_network(&found) {
        let mut repairs = Vec::new();
        for dup in rest {
            let users: Vec<&str> = dup
                .endpoints
                .iter()
                .map(String::as_str)
                .filter(|e| Some(*e) != api)
                .collect();
            if !users.is_empty() {
                repairs.push(format!(
                    "duplicate network {} ({}) left in place: {} still use(s) it; `ninetrix down` \
                     and `ninetrix up` replace it",
                    dup.name,
                    short_id(&dup.id),
                    users.join(", ")
                ));
                continue;
            }
            if let Some(api) = api.filter(|a| dup.endpoints.iter().any(|e| e == a)) {
                let _ = docker
                    .disconnect_network(
                        &dup.id,
                        NetworkDisconnectRequest {
                            container: api.to_string(),
                            force: Some(true),
                        },
                    )
                    .await;
            }
            match remove_network(docker, &dup.id, &[]).await {
                Ok(()) => repairs.push(format!(
                    "removed duplicate network {} ({})",
                    dup.name,
                    short_id(&dup.id)
                )),
                Err(e) => repairs.push(format!(
                    "duplicate network {} ({}) left in place: {e:#}",
                    dup.name,
                    short_id(&dup.id)
                )),
            }
        }
        return Ok(PoolNetwork {
            id: keep.id.clone(),
            name: keep.name.clone(),
            created: false,
            repairs,
        });
    }
    let labels: HashMap<String, String> = [
        (crate::objects::POOL.to_string(), pool.to_string()),
        (ROLE.to_string(), "network".to_string()),
    ]
    .into();
    let created = docker
        .create_network(NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels),
            ..NetworkCreateRequest::default()
        })
        .await
        .with_context(|| format!("cannot create network {name}"))?;
    Ok(PoolNetwork {
        id: created.id,
        name,
        created: true,
        repairs: Vec::new(),
    })
}

/// Uploads secrets — and, for a runner, its runner token — to `/run/secrets/` (0400) of a
/// created, not yet started container.
pub(crate) async fn upload_secrets(
    docker: &Docker,
    id: &str,
    secrets: &BTreeMap<String, String>,
    token: Option<&str>,
) -> anyhow::Result<()> {
    let mut files: Vec<(&str, &str)> = secrets
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some(token) = token {
        files.push((ninetrix_runner::launch::var::RUNNER_TOKEN, token));
    }
    docker
        .upload_to_container(
            id,
            Some(
                UploadToContainerOptionsBuilder::default()
                    .path(crate::hardening::SECRETS_DIR)
                    .build(),
            ),
            bollard::body_full(crate::pool::local_api::secrets_tar(&files)?.into()),
        )
        .await?;
    Ok(())
}

/// The pool's containers (all states), found by label.
pub(crate) async fn pool_containers(
    docker: &Docker,
    pool: Option<&str>,
) -> anyhow::Result<Vec<ContainerSummary>> {
    let label = match pool {
        Some(p) => format!("{}={p}", crate::objects::POOL),
        None => crate::objects::POOL.to_string(),
    };
    let filters: HashMap<&str, Vec<String>> = [("label", vec![label])].into_iter().collect();
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .context("cannot list containers")
}
