//! One minimal, well-formed single-record ClientHello for the step's
//! tests: a name, and an ALPN offer when given.

/// A ClientHello record naming `sni`, offering `alpn` when given.
pub(crate) fn hello(sni: &str, alpn: Option<&str>) -> Vec<u8> {
    let mut extensions = Vec::new();
    let name = sni.as_bytes();
    extensions.extend_from_slice(&[0, 0]);
    extensions.extend_from_slice(&((name.len() + 5) as u16).to_be_bytes());
    extensions.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
    extensions.push(0);
    extensions.extend_from_slice(&(name.len() as u16).to_be_bytes());
    extensions.extend_from_slice(name);
    if let Some(protocol) = alpn.map(str::as_bytes) {
        extensions.extend_from_slice(&[0, 16]);
        extensions.extend_from_slice(&((protocol.len() + 3) as u16).to_be_bytes());
        extensions.extend_from_slice(&((protocol.len() + 1) as u16).to_be_bytes());
        extensions.push(protocol.len() as u8);
        extensions.extend_from_slice(protocol);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[1; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
    record.push(1);
    record.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    record.extend(body);
    record
}
