//! `cluster list`, `frontend list` and `backend list`: every page of a
//! listing, gathered into the one answer that `print` shows.
//!
//! Owns: asking page after page, each starting after the last entry of
//! the one before, until the proxy says no more follow. Must never: loop
//! on a page that does not move the cursor (a proxy that answered an empty
//! page with more to come would otherwise be asked forever).

use command::channel::{BlockingChannel, ChannelError};
use command::proto::{self, request::RequestType, response_content::ContentType};

/// Sends `request` and returns its answer; a listing is asked page by page
/// and its pages joined. A refusal of any page is the answer.
pub(super) fn request_all(
    channel: &mut BlockingChannel,
    request: &proto::Request,
    on_progress: impl FnMut(&proto::Response),
) -> Result<proto::Response, String> {
    let mut first = channel
        .request(request, on_progress)
        .map_err(|e| e.to_string())?;
    let next = match &request.request_type {
        Some(RequestType::ListFrontends(page)) => Next::Frontends(page.limit),
        Some(RequestType::ListClusters(page)) => Next::Clusters(page.limit),
        Some(RequestType::ListBackends(page)) => Next::Backends(page.limit),
        _ => return Ok(first),
    };
    loop {
        let Some(content) = first.content.as_mut().and_then(|c| c.content_type.as_mut()) else {
            return Ok(first);
        };
        let Some(request) = next.after(content)? else {
            return Ok(first);
        };
        let mut page = channel.request(&request, |_| {}).map_err(describe)?;
        let Some(more) = page.content.take().and_then(|c| c.content_type) else {
            return Ok(page);
        };
        next.join(content, more)?;
    }
}

fn describe(error: ChannelError) -> String {
    format!("the proxy did not answer the next page: {error}")
}

/// Which listing is gathered, with the page limit the caller asked for.
enum Next {
    Frontends(u32),
    Clusters(u32),
    Backends(u32),
}

const STUCK: &str = "the proxy answered an empty page with more to follow: is it older \
                     than this preread? (`preread status` shows its version)";

impl Next {
    /// The request for the page after what `gathered` holds, if more follow.
    fn after(&self, gathered: &ContentType) -> Result<Option<proto::Request>, String> {
        let kind = match (self, gathered) {
            (Self::Frontends(limit), ContentType::Frontends(list)) if list.more => {
                let Some(last) = list.frontends.last() else {
                    return Err(STUCK.to_owned());
                };
                RequestType::ListFrontends(proto::ListFrontends {
                    after: Some(last.clone()),
                    limit: *limit,
                })
            }
            (Self::Clusters(limit), ContentType::Clusters(list)) if list.more => {
                let Some(last) = list.clusters.last().and_then(|e| e.cluster.as_ref()) else {
                    return Err(STUCK.to_owned());
                };
                RequestType::ListClusters(proto::ListClusters {
                    after: Some(last.cluster_id.clone()),
                    limit: *limit,
                })
            }
            (Self::Backends(limit), ContentType::Backends(list)) if list.more => {
                let Some(last) = list.backends.last().and_then(|s| s.backend.as_ref()) else {
                    return Err(STUCK.to_owned());
                };
                RequestType::ListBackends(proto::ListBackends {
                    after: Some(last.backend_id.clone()),
                    limit: *limit,
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(proto::Request {
            request_type: Some(kind),
        }))
    }

    /// Appends the next page to what was gathered.
    fn join(&self, gathered: &mut ContentType, page: ContentType) -> Result<(), String> {
        match (gathered, page) {
            (ContentType::Frontends(list), ContentType::Frontends(page)) => {
                list.frontends.extend(page.frontends);
                list.more = page.more;
            }
            (ContentType::Clusters(list), ContentType::Clusters(page)) => {
                list.clusters.extend(page.clusters);
                list.more = page.more;
            }
            (ContentType::Backends(list), ContentType::Backends(page)) => {
                list.backends.extend(page.backends);
                list.more = page.more;
            }
            _ => return Err("the proxy answered a page with another kind of list".to_owned()),
        }
        Ok(())
    }
}
