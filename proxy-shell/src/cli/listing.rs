//! `cluster list`, `frontend list` and `backend list`: every page of a
//! listing, gathered into the one answer that `print` shows.
//!
//! Owns: asking page after page, each starting after the last entry of
//! the one before, until the proxy says no more follow. Must never: loop
//! on a page that does not move the cursor (a proxy that answered an empty
//! page with more to come would otherwise be asked forever).

use core::fmt;

use command::channel::{BlockingChannel, ChannelError};
use command::proto::{self, request::RequestType, response_content::ContentType};

/// Why a listing could not be gathered whole.
#[derive(Debug)]
pub(super) enum ListingError {
    /// The first (or only) request got no answer.
    First(ChannelError),
    /// A later page got no answer.
    NextPage(ChannelError),
    /// An empty page said more follow: the cursor cannot move.
    Stuck,
    /// A page of another kind of list than the first.
    OtherKind,
}

impl fmt::Display for ListingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::First(error) => error.fmt(f),
            Self::NextPage(error) => {
                write!(f, "the proxy did not answer the next page: {error}")
            }
            Self::Stuck => f.write_str(
                "the proxy answered an empty page with more to follow: is it older than this \
                 preread? (`preread status` shows its version)",
            ),
            Self::OtherKind => f.write_str("the proxy answered a page with another kind of list"),
        }
    }
}

impl core::error::Error for ListingError {}

/// Sends `request` and returns its answer; a listing is asked page by page
/// and its pages joined. A refusal of any page is the answer.
pub(super) fn request_all(
    channel: &mut BlockingChannel,
    request: &proto::Request,
    on_progress: impl FnMut(&proto::Response),
) -> Result<proto::Response, ListingError> {
    let mut first = channel
        .request(request, on_progress)
        .map_err(ListingError::First)?;
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
        let mut page = channel
            .request(&request, |_| {})
            .map_err(ListingError::NextPage)?;
        let Some(more) = page.content.take().and_then(|c| c.content_type) else {
            return Ok(page);
        };
        next.join(content, more)?;
    }
}

/// Which listing is gathered, with the page limit the caller asked for.
enum Next {
    Frontends(u32),
    Clusters(u32),
    Backends(u32),
}

impl Next {
    /// The request for the page after what `gathered` holds, if more follow.
    fn after(&self, gathered: &ContentType) -> Result<Option<proto::Request>, ListingError> {
        let kind = match (self, gathered) {
            (Self::Frontends(limit), ContentType::Frontends(list)) if list.more => {
                let Some(last) = list.frontends.last() else {
                    return Err(ListingError::Stuck);
                };
                RequestType::ListFrontends(proto::ListFrontends {
                    after: Some(last.clone()),
                    limit: *limit,
                })
            }
            (Self::Clusters(limit), ContentType::Clusters(list)) if list.more => {
                let Some(last) = list.clusters.last().and_then(|e| e.cluster.as_ref()) else {
                    return Err(ListingError::Stuck);
                };
                RequestType::ListClusters(proto::ListClusters {
                    after: Some(last.cluster_id.clone()),
                    limit: *limit,
                })
            }
            (Self::Backends(limit), ContentType::Backends(list)) if list.more => {
                let Some(last) = list.backends.last().and_then(|s| s.backend.as_ref()) else {
                    return Err(ListingError::Stuck);
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
    fn join(&self, gathered: &mut ContentType, page: ContentType) -> Result<(), ListingError> {
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
            _ => return Err(ListingError::OtherKind),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_that_cannot_move_the_cursor_says_to_check_the_proxy_version() {
        let stuck = ContentType::Frontends(proto::FrontendList {
            more: true,
            ..Default::default()
        });
        let error = Next::Frontends(10).after(&stuck);
        assert!(matches!(error, Err(ListingError::Stuck)), "{error:?}");
        assert!(
            error.is_err_and(|e| e.to_string().contains("`preread status` shows its version")),
            "the message says how to find the proxy's version"
        );
        let mut gathered = stuck.clone();
        let other = ContentType::Clusters(proto::ClusterList::default());
        assert!(matches!(
            Next::Frontends(10).join(&mut gathered, other),
            Err(ListingError::OtherKind)
        ));
    }
}
