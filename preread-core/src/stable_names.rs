//! The one way the workspace declares an enum whose variants have stable
//! names (reject reasons, validation codes, answer codes): [`crate::stable_names!`].
//!
//! Owns: the shape such an enum takes, written once: each variant declared
//! with its name, an `as_str` that is one total `match` (a variant without
//! a name does not parse, so it cannot compile), a list of the variants in
//! order, and `Display` as the name. Must never: hold a name itself; the
//! names live beside their enums, where the documents that fix them cite
//! them.

/// Declares an enum whose every variant has a stable name.
///
/// ```
/// preread_core::stable_names! {
///     /// How a door ended up.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Door {
///         /// Left open.
///         Open => "open",
///         /// Shut.
///         Shut => "shut";
///         /// Another thing's name, passed through.
///         Other(why: &'static str) => why,
///     }
///     /// Every door without data, in order.
///     pub const ALL;
/// }
/// assert_eq!(Door::ALL, [Door::Open, Door::Shut]);
/// assert_eq!(Door::Shut.to_string(), "shut");
/// assert_eq!(Door::Other("stuck").as_str(), "stuck");
/// ```
///
/// The variants with data, after a `;`, take their name from their
/// value, and are not in the list. The list is there when asked for, with
/// the caller's name and visibility (`ALL`, or `OWN` for the codes an enum
/// adds to another's).
#[macro_export]
macro_rules! stable_names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $Name:ident {
            $( $(#[$unit_meta:meta])* $Unit:ident => $name:literal ),+
            $( ; $( $(#[$data_meta:meta])* $Data:ident ($bind:ident : $Inner:ty) => $data_name:expr ),+ )?
            $(,)?
        }
        $(#[$list_meta:meta])*
        $list_vis:vis const $LIST:ident;
    ) => {
        $crate::stable_names! {
            $(#[$meta])*
            $vis enum $Name {
                $( $(#[$unit_meta])* $Unit => $name ),+
                $( ; $( $(#[$data_meta])* $Data ($bind : $Inner) => $data_name ),+ )?
            }
        }

        impl $Name {
            $(#[$list_meta])*
            $list_vis const $LIST: [Self; [$(stringify!($Unit)),+].len()] = [$(Self::$Unit),+];
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $Name:ident {
            $( $(#[$unit_meta:meta])* $Unit:ident => $name:literal ),+
            $( ; $( $(#[$data_meta:meta])* $Data:ident ($bind:ident : $Inner:ty) => $data_name:expr ),+ )?
            $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $Name {
            $( $(#[$unit_meta])* $Unit, )+
            $($( $(#[$data_meta])* $Data($Inner), )+)?
        }

        impl $Name {
            /// The stable name, as logs, metric names, documents and
            /// scripts spell it: never changed once shipped.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$Unit => $name, )+
                    $($( Self::$Data($bind) => $data_name, )+)?
                }
            }
        }

        /// The stable name.
        impl ::core::fmt::Display for $Name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
