//! The order of a ClientHello's faults: a field that decodes but holds a
//! forbidden value is reported only once the whole body decoded, as a
//! server decodes a message before it judges it.
//!
//! Owns: [`Forbidden`], the first such fault, kept for later. Must never:
//! hold back a fault of bytes that do not decode.

use super::HandshakeFault;

/// The first fault of a field that decoded but holds a forbidden value,
/// kept until the whole body decoded: a length that lies anywhere in the
/// ClientHello is what a server answers (`decode_error`), whatever value
/// came before it.
#[derive(Default)]
pub(super) struct Forbidden(Option<HandshakeFault>);

impl Forbidden {
    /// `Ok` with the value, `Ok(None)` after noting a forbidden value, or
    /// the fault of bytes that do not decode.
    pub(super) fn check<T>(
        &mut self,
        parsed: Result<T, HandshakeFault>,
    ) -> Result<Option<T>, HandshakeFault> {
        match parsed {
            Ok(value) => Ok(Some(value)),
            Err(fault) => self.note(fault).map(|()| None),
        }
    }

    /// Keeps `fault` for later when it is a forbidden value; else it is
    /// the answer now.
    pub(super) fn note(&mut self, fault: HandshakeFault) -> Result<(), HandshakeFault> {
        if !fault.is_forbidden_value() {
            return Err(fault);
        }
        self.0.get_or_insert(fault);
        Ok(())
    }

    /// `value`, unless a forbidden value was noted on the way.
    pub(super) fn or<T>(self, value: T) -> Result<T, HandshakeFault> {
        self.0.map_or(Ok(value), Err)
    }
}
