//! The client's ALPN offer, kept after the window is gone.
//!
//! Owns: [`AlpnOffer`], one owned copy of the wire list, iterated through the
//! parser's own validated view so the list rules live in one place.

use core::fmt;

use preread_parser::tls::AlpnProtocols;

/// The client's ALPN protocol names, in its preference order.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AlpnOffer(Box<[u8]>);

impl AlpnOffer {
    /// The protocol names, most preferred first.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        // The bytes came from a validated list, so `from_list` cannot refuse them.
        AlpnProtocols::from_list(&self.0).into_iter().flatten()
    }
}

impl From<AlpnProtocols<'_>> for AlpnOffer {
    fn from(offer: AlpnProtocols<'_>) -> Self {
        Self(offer.list_bytes().into())
    }
}

impl fmt::Debug for AlpnOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// Comma-separated, as the access log prints it.
impl fmt::Display for AlpnOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, protocol) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&String::from_utf8_lossy(protocol))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use preread_parser::tls::AlpnProtocols;

    use super::AlpnOffer;

    #[test]
    fn the_offer_prints_as_the_access_log_and_debug_show_it() {
        let list = b"\x02h2\x08http/1.1";
        let offer = AlpnOffer::from(AlpnProtocols::from_list(list).expect("valid list"));
        assert_eq!(offer.to_string(), "h2,http/1.1");
        assert_eq!(format!("{offer:?}"), r#"["h2", "http/1.1"]"#);
        let single = AlpnOffer::from(AlpnProtocols::from_list(b"\x02h2").expect("valid list"));
        assert_eq!(single.to_string(), "h2");
        assert_eq!(single.iter().collect::<Vec<_>>(), [&b"h2"[..]]);
    }
}
