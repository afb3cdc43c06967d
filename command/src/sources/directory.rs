//! The directory source's vocabulary: one `*.toml` file of the watched
//! directory turned into one fragment.
//!
//! Owns: which names are fragment files ([`is_fragment_file`]), the
//! fragment of a file's text (cluster tables, as in the config file,
//! through the config file's own parser) and of a file that cannot be
//! read. Must never: read the directory itself (the shell does, and hands
//! each file's text in), or accept in a fragment file what only the config
//! file may declare (listeners, global settings: E002).

use super::{Declared, Fragment, FragmentBody, FragmentId, Problem, SourceKind};
use crate::codes::ErrorCode;
use crate::config::load_fragment;

/// Whether `file_name` is a fragment file: it ends in `.toml` and is not
/// hidden (editors and `rsync` write their temporary copies as `.name`).
#[must_use]
pub fn is_fragment_file(file_name: &str) -> bool {
    file_name.len() > ".toml".len() && file_name.ends_with(".toml") && !file_name.starts_with('.')
}

/// The fragment of the file `file_name` holding `text`: its cluster tables
/// as requests, each placed at `file_name:line:column`; or, when it does
/// not parse, every problem of it, placed the same way.
#[must_use]
pub fn fragment(file_name: &str, text: &str) -> Fragment {
    toml_fragment(SourceKind::Directory, file_name, file_name, text)
}

/// The fragment `name` of `kind` holding the TOML `text`, its requests
/// placed at `place:line:column` (the directory's and etcd's format).
pub(super) fn toml_fragment(kind: SourceKind, name: &str, place: &str, text: &str) -> Fragment {
    let file_name = place;
    let body = match load_fragment(text) {
        Ok(requests) => FragmentBody::Declared(
            requests
                .into_iter()
                .map(|located| Declared {
                    request: located.request,
                    origin: format!("{file_name}:{}", located.location),
                })
                .collect(),
        ),
        Err(problems) => FragmentBody::Broken(
            problems
                .into_iter()
                .map(|problem| Problem {
                    code: problem.code,
                    message: match problem.location {
                        Some(at) => format!("{file_name}:{at}: {}", problem.message),
                        None => format!("{file_name}: {}", problem.message),
                    },
                })
                .collect(),
        ),
    };
    Fragment {
        id: FragmentId::new(kind, name),
        body,
    }
}

/// The fragment of a file that could not be read: left out, saying why.
#[must_use]
pub fn unreadable(file_name: &str, why: &str) -> Fragment {
    Fragment {
        id: FragmentId::new(SourceKind::Directory, file_name),
        body: FragmentBody::Broken(vec![Problem {
            code: ErrorCode::InvalidToml,
            message: format!("{file_name}: cannot be read: {why}"),
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::request::RequestType;

    #[test]
    fn fragment_files_are_visible_toml_files() {
        for yes in ["web.toml", "a.b.toml", "x-1.toml"] {
            assert!(is_fragment_file(yes), "{yes}");
        }
        for no in [
            ".web.toml",
            ".toml",
            "web.toml.swp",
            "web.toml~",
            "web.json",
            "toml",
        ] {
            assert!(!is_fragment_file(no), "{no}");
        }
    }

    #[test]
    fn cluster_tables_become_located_requests() {
        let text = "\n[clusters.web]\nfrontends = [{ address = \"*:8443\", sni = \"web.example.com\" }]\nbackends = [{ address = \"127.0.0.1:9001\" }]\n";
        let fragment = fragment("web.toml", text);
        let FragmentBody::Declared(declared) = &fragment.body else {
            panic!("{fragment:?}");
        };
        let declared = declared.decode();
        let origins: Vec<&str> = declared.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(origins, ["web.toml:2:1", "web.toml:3:14", "web.toml:4:13"]);
        match &declared[2].request.request_type {
            Some(RequestType::AddBackend(backend)) => assert_eq!(backend.backend_id, "web-0"),
            other => panic!("{other:?}"),
        }
        assert_eq!(fragment.routes(), 1);
    }

    #[test]
    fn what_only_the_config_file_declares_is_refused_with_its_line() {
        for (text, code, at) in [
            ("worker_count = 2\n", ErrorCode::UnknownKey, "x.toml:1:1: "),
            (
                "\n[[listeners]]\naddress = \"127.0.0.1:1\"\n",
                ErrorCode::UnknownKey,
                "x.toml:2:",
            ),
            ("[clusters.web\n", ErrorCode::InvalidToml, "x.toml:1:"),
            (
                "[clusters.web]\nload_balancing = \"fastest\"\n",
                ErrorCode::InvalidValue,
                "x.toml:2:18: ",
            ),
        ] {
            let FragmentBody::Broken(problems) = fragment("x.toml", text).body else {
                panic!("{text:?} parsed");
            };
            assert_eq!(problems[0].code, code, "{text:?}: {problems:?}");
            assert!(
                problems[0].message.starts_with(at),
                "{text:?}: {problems:?}"
            );
        }
        let FragmentBody::Broken(problems) = unreadable("y.toml", "permission denied").body else {
            panic!("unreadable");
        };
        assert_eq!(problems[0].code, ErrorCode::InvalidToml);
    }
}
