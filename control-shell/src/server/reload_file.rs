//! The config file a reload reads: the proxy's own on SIGHUP, or the one
//! `preread reload` names, read by the proxy itself.
//!
//! Owns: reading the file once and making sure it is the file the CLI saw
//! (same size and CRC-32: a proxy in another mount namespace or container
//! sees another file at that path, and must not reload it), and that it is
//! text; the coordinator's reread (`command::reread`) checks it as every
//! other path does. Reading the file here spares the CLI its parse and the
//! proxy a second one of the same declarations sent over the socket. Must
//! never: hand on a file other than the one the CLI saw.

use std::path::Path;

use command::codes::ErrorCode;
use command::config::ConfigProblem;
use command::proto;

pub(super) use coordinator::Unread;

/// The text of the config at `path`; when `seen` is given, only if the
/// file is the one it describes.
pub(super) fn read(path: &Path, seen: Option<&proto::ReloadFile>) -> Result<String, Unread> {
    let bytes = std::fs::read(path).map_err(|error| {
        Unread::Unseen(format!("the proxy cannot read {}: {error}", path.display()))
    })?;
    if let Some(seen) = seen {
        let (size, crc32) = (bytes.len() as u64, crc32fast::hash(&bytes));
        if (size, crc32) != (seen.size, seen.crc32) {
            return Err(Unread::Unseen(format!(
                "the proxy reads another file at {}: {size} bytes with CRC-32 {crc32:08x}, \
                 not {} bytes with {:08x}",
                path.display(),
                seen.size,
                seen.crc32
            )));
        }
    }
    String::from_utf8(bytes).map_err(|error| {
        Unread::Refused(vec![ConfigProblem {
            location: None,
            code: ErrorCode::InvalidToml,
            message: format!("config file {} is not UTF-8: {error}", path.display()),
        }])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(bytes: &[u8]) -> proto::ReloadFile {
        proto::ReloadFile {
            path: String::new(),
            size: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
        }
    }

    type Outcome = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn only_the_file_the_cli_saw_is_loaded() -> Outcome {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("preread.toml");
        let text = "[[listeners]]\naddress = \"127.0.0.1:9443\"\n";
        std::fs::write(&path, text)?;
        let read_back = read(&path, Some(&seen(text.as_bytes()))).map_err(|e| format!("{e:?}"))?;
        assert_eq!(read_back, text);
        assert!(read(&path, None).is_ok(), "SIGHUP checks nothing more");
        let other = seen(b"[[listeners]]\naddress = \"127.0.0.1:9444\"\n");
        assert!(
            matches!(read(&path, Some(&other)), Err(Unread::Unseen(m)) if m.contains("another file"))
        );
        let missing = dir.path().join("gone.toml");
        assert!(
            matches!(read(&missing, None), Err(Unread::Unseen(m)) if m.contains("cannot read"))
        );
        Ok(())
    }

    #[test]
    fn a_file_that_is_not_text_is_refused() -> Outcome {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("preread.toml");
        std::fs::write(&path, b"\xff\xfe")?;
        let Err(Unread::Refused(problems)) = read(&path, None) else {
            return Err("bytes that are not UTF-8 were read as text".into());
        };
        assert_eq!(
            problems.first().map(|p| p.code),
            Some(ErrorCode::InvalidToml)
        );
        Ok(())
    }
}
