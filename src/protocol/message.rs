//! Message layouts declared once, as data.
//!
//! [`wire_struct!`](crate::protocol::wire_struct) declares a protocol structure field by field, each
//! with the version range it exists in and its default. It generates the struct, its
//! `Default`, and a [`Wire`] implementation that encodes and decodes exactly the fields of
//! the negotiated version (compact encodings and a tagged-field section in flexible
//! versions). A new version is a one-line change; a field absent from the negotiated
//! version is never sent and reads as its default.
//!
//! ```ignore
//! wire_struct! {
//!     pub struct FetchPartition {
//!         partition: i32, since 0;
//!         current_leader_epoch: i32, since 9, default -1;
//!         fetch_offset: i64, since 0;
//!     }
//! }
//! ```
//!
//! Field types: the integers, `bool`, [`Uuid`], `String` / `Option<String>` (nullable),
//! [`Bytes`] / `Option<Bytes>` (nullable bytes), `Vec<T>` / `Option<Vec<T>>` (nullable
//! array) of any of these or of a declared structure, and `Option<S>` of a declared
//! structure `S` (a nullable struct field: an `int8` marker, -1 for null and 1 before the
//! structure, as Kafka's generated code writes it; a negative marker reads as null).
//! A field whose schema makes it nullable only from some version is declared nullable;
//! below that version it must be `Some` (the encoder would write a null the schema forbids).
//!
//! Tagged fields are skipped on decode and never written; the few a consumer may want
//! later (Fetch `DivergingEpoch`, `CurrentLeader`) will get their own declaration form.

use super::wire::{DecodeError, Reader, Writer};

/// The negotiated version of one message, and whether it uses the flexible encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// The API version number.
    pub v: i16,
    /// Whether this version is flexible (compact types, tagged fields; KIP-482).
    pub flexible: bool,
}

/// A type with a wire encoding that may depend on the message version.
pub trait Wire: Sized {
    /// Appends the encoding of `self` at version `v`.
    fn write(&self, w: &mut Writer, v: Version);
    /// Decodes a value at version `v`.
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError>;
    /// The fewest bytes one element can take, used to reject impossible array counts.
    const MIN_SIZE: usize = 1;
}

/// A 16-byte topic id. All zeros means "no id".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The all-zero id, which Kafka uses for "none".
    pub const ZERO: Uuid = Uuid([0; 16]);

    /// Whether this is the all-zero id.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl std::fmt::Display for Uuid {
    /// URL-safe base64 without padding, as Kafka prints topic ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let b = &self.0;
        let mut out = String::with_capacity(22);
        for chunk in b.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, &x)| acc | (x as u32) << (16 - 8 * i));
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        f.write_str(&out)
    }
}

/// Opaque bytes (`BYTES`, non-null).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

/// A nullable record set left in place: the byte range it occupies in the response frame,
/// so record batches are decoded straight from the received buffer without a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordsRef {
    /// Absolute start of the records in the frame.
    pub start: usize,
    /// Length in bytes (0 for a null or empty record set).
    pub len: usize,
}

macro_rules! int_wire {
    ($($t:ty => $read:ident, $size:expr);* $(;)?) => {$(
        impl Wire for $t {
            fn write(&self, w: &mut Writer, _v: Version) {
                w.$read(*self);
            }
            fn read(r: &mut Reader<'_>, _v: Version) -> Result<Self, DecodeError> {
                r.$read()
            }
            const MIN_SIZE: usize = $size;
        }
    )*};
}

int_wire! {
    i8 => i8, 1;
    i16 => i16, 2;
    i32 => i32, 4;
    i64 => i64, 8;
    bool => bool, 1;
}

impl Wire for Uuid {
    fn write(&self, w: &mut Writer, _v: Version) {
        w.raw(&self.0);
    }
    fn read(r: &mut Reader<'_>, _v: Version) -> Result<Self, DecodeError> {
        r.uuid().map(Uuid)
    }
    const MIN_SIZE: usize = 16;
}

impl Wire for String {
    fn write(&self, w: &mut Writer, v: Version) {
        w.string(self, v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        r.string(v.flexible).map(str::to_owned)
    }
}

impl Wire for Option<String> {
    fn write(&self, w: &mut Writer, v: Version) {
        w.nullable_string(self.as_deref(), v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        Ok(r.nullable_string(v.flexible)?.map(str::to_owned))
    }
}

impl Wire for Bytes {
    fn write(&self, w: &mut Writer, v: Version) {
        w.nullable_bytes(Some(&self.0), v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        match r.nullable_bytes(v.flexible)? {
            Some(b) => Ok(Bytes(b.to_vec())),
            None => Err(DecodeError::invalid("null where bytes are required")),
        }
    }
}

impl Wire for Option<Bytes> {
    fn write(&self, w: &mut Writer, v: Version) {
        w.nullable_bytes(self.as_ref().map(|b| &b.0[..]), v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        Ok(r.nullable_bytes(v.flexible)?.map(|b| Bytes(b.to_vec())))
    }
}

impl Wire for RecordsRef {
    /// Records are only ever received by a consumer; encoding writes a null record set.
    fn write(&self, w: &mut Writer, v: Version) {
        w.nullable_bytes(None, v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        let start_before = r.position();
        match r.nullable_bytes(v.flexible)? {
            None => Ok(RecordsRef {
                start: r.position(),
                len: 0,
            }),
            Some(b) => {
                let len = b.len();
                let start = r.position() - len;
                debug_assert!(start >= start_before);
                Ok(RecordsRef { start, len })
            }
        }
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn write(&self, w: &mut Writer, v: Version) {
        w.array_len(Some(self.len()), v.flexible);
        for x in self {
            x.write(w, v);
        }
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        match r.array_len(v.flexible, T::MIN_SIZE)? {
            None => Err(DecodeError::invalid("null where an array is required")),
            Some(n) => (0..n).map(|_| T::read(r, v)).collect(),
        }
    }
}

impl<T: Wire> Wire for Option<Vec<T>> {
    fn write(&self, w: &mut Writer, v: Version) {
        match self {
            None => w.array_len(None, v.flexible),
            Some(xs) => xs.write(w, v),
        }
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        match r.array_len(v.flexible, T::MIN_SIZE)? {
            None => Ok(None),
            Some(n) => (0..n)
                .map(|_| T::read(r, v))
                .collect::<Result<_, _>>()
                .map(Some),
        }
    }
}

/// Declares a protocol structure with per-field version ranges. See the module docs.
///
/// Each field is `name: Type, since LO [, until HI] [, default EXPR];`.
macro_rules! wire_struct {
    ($(
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $ty:ty, since $lo:literal $(, until $hi:literal)? $(, default $def:expr)?;
            )*
        }
    )*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        #[allow(dead_code)]
        $vis struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                #[allow(unused_imports)]
                use $crate::protocol::message::Wire as _;
                $name { $( $field: $crate::protocol::wire_struct!(@default $ty $(, $def)?), )* }
            }
        }

        impl $crate::protocol::message::Wire for $name {
            #[allow(unused_variables)]
            fn write(&self, w: &mut $crate::protocol::wire::Writer, v: $crate::protocol::message::Version) {
                $(
                    if v.v >= $lo $(&& v.v <= $hi)? {
                        $crate::protocol::message::Wire::write(&self.$field, w, v);
                    }
                )*
                if v.flexible {
                    w.empty_tagged_fields();
                }
            }

            #[allow(unused_mut, unused_variables)]
            fn read(
                r: &mut $crate::protocol::wire::Reader<'_>,
                v: $crate::protocol::message::Version,
            ) -> Result<Self, $crate::protocol::wire::DecodeError> {
                let mut s = <$name as Default>::default();
                $(
                    if v.v >= $lo $(&& v.v <= $hi)? {
                        s.$field = $crate::protocol::message::Wire::read(r, v)
                            .map_err(|e| e.context(concat!(stringify!($name), ".", stringify!($field))))?;
                    }
                )*
                if v.flexible {
                    r.skip_tagged_fields()
                        .map_err(|e| e.context(concat!(stringify!($name), " tagged fields")))?;
                }
                Ok(s)
            }
        }

        /// A nullable struct field: an `int8` marker (-1 null, 1 present), then the struct.
        impl $crate::protocol::message::Wire for Option<$name> {
            fn write(&self, w: &mut $crate::protocol::wire::Writer, v: $crate::protocol::message::Version) {
                match self {
                    None => w.i8(-1),
                    Some(s) => {
                        w.i8(1);
                        $crate::protocol::message::Wire::write(s, w, v);
                    }
                }
            }

            fn read(
                r: &mut $crate::protocol::wire::Reader<'_>,
                v: $crate::protocol::message::Version,
            ) -> Result<Self, $crate::protocol::wire::DecodeError> {
                if r.i8()? < 0 {
                    return Ok(None);
                }
                <$name as $crate::protocol::message::Wire>::read(r, v).map(Some)
            }
        }
    )*};
    (@default $ty:ty) => { <$ty as Default>::default() };
    (@default $ty:ty, $def:expr) => { $def };
}
pub(crate) use wire_struct;

#[cfg(test)]
mod tests {
    use super::*;

    crate::protocol::wire_struct! {
        struct Inner {
            a: i32, since 0;
            b: Option<String>, since 1, default Some("dflt".into());
        }
        struct Outer {
            x: i16, since 0, until 2, default -1;
            id: Uuid, since 3;
            inner: Vec<Inner>, since 0;
            maybe: Option<Vec<i32>>, since 2;
        }
    }

    fn v(v: i16, flexible: bool) -> Version {
        Version { v, flexible }
    }

    #[test]
    fn fields_follow_their_version_ranges() {
        let o = Outer {
            x: 7,
            id: Uuid([9; 16]),
            inner: vec![Inner {
                a: 1,
                b: Some("z".into()),
            }],
            maybe: Some(vec![4, 5]),
        };
        for ver in 0..=4 {
            for flexible in [false, true] {
                let mut w = Writer::new();
                o.write(&mut w, v(ver, flexible));
                let b = w.into_inner();
                let mut r = Reader::new(&b);
                let back = Outer::read(&mut r, v(ver, flexible)).unwrap();
                r.finish().unwrap();
                assert_eq!(back.x, if ver <= 2 { 7 } else { -1 });
                assert_eq!(back.id, if ver >= 3 { Uuid([9; 16]) } else { Uuid::ZERO });
                assert_eq!(
                    back.inner[0].b.as_deref(),
                    Some(if ver >= 1 { "z" } else { "dflt" })
                );
                assert_eq!(back.maybe, if ver >= 2 { Some(vec![4, 5]) } else { None });
            }
        }
    }

    #[test]
    fn decode_errors_name_the_field() {
        let mut w = Writer::new();
        w.i16(1);
        w.i32(1); // one Inner...
        w.i32(5); // ...whose `b` is missing
        let b = w.into_inner();
        let e = Outer::read(&mut Reader::new(&b), v(1, false)).unwrap_err();
        assert!(e.to_string().starts_with("Outer.inner: Inner.b: "), "{e}");
    }

    crate::protocol::wire_struct! {
        struct Blob {
            data: Bytes, since 0;
            maybe: Option<Bytes>, since 0;
            inner: Option<Inner>, since 1;
        }
    }

    fn encode<T: Wire>(x: &T, ver: Version) -> Vec<u8> {
        let mut w = Writer::new();
        x.write(&mut w, ver);
        w.into_inner()
    }

    #[test]
    fn bytes_nullable_bytes_and_nullable_structs_follow_the_schema_encoding() {
        let blob = Blob {
            data: Bytes(vec![0xab, 0xcd]),
            maybe: Some(Bytes(vec![])),
            inner: Some(Inner { a: 3, b: None }),
        };
        // Classic: int32 lengths, null bytes -1; the struct behind a 1 marker.
        let b = encode(&blob, v(1, false));
        let mut want = vec![0, 0, 0, 2, 0xab, 0xcd]; // data
        want.extend_from_slice(&[0, 0, 0, 0]); // maybe: empty, not null
        want.extend_from_slice(&[1, 0, 0, 0, 3, 0xff, 0xff]); // inner: marker, a, b null
        assert_eq!(b, want);
        assert_eq!(Blob::read(&mut Reader::new(&b), v(1, false)).unwrap(), blob);
        // Flexible: compact lengths (length + 1, 0 = null) and tagged-field sections.
        let b = encode(&blob, v(1, true));
        let want = [3, 0xab, 0xcd, 1, 1, 0, 0, 0, 3, 0, 0, 0];
        assert_eq!(b, want);
        assert_eq!(Blob::read(&mut Reader::new(&b), v(1, true)).unwrap(), blob);
        // Nulls: bytes -1 / 0, struct -1.
        let nulls = Blob {
            maybe: None,
            inner: None,
            ..blob.clone()
        };
        let b = encode(&nulls, v(1, false));
        assert_eq!(b[6..], [0xff, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            Blob::read(&mut Reader::new(&b), v(1, false)).unwrap(),
            nulls
        );
        let b = encode(&nulls, v(1, true));
        assert_eq!(b[3..], [0, 0xff, 0]);
        assert_eq!(Blob::read(&mut Reader::new(&b), v(1, true)).unwrap(), nulls);
        // Any negative marker is null, any other is a struct (as the Java reader has it).
        let b = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x80];
        assert_eq!(
            Blob::read(&mut Reader::new(&b), v(1, false)).unwrap().inner,
            None
        );
        let b = [
            0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 9, 0, 1, b'x',
        ];
        let inner = Blob::read(&mut Reader::new(&b), v(1, false)).unwrap().inner;
        assert_eq!(
            inner,
            Some(Inner {
                a: 9,
                b: Some("x".into())
            })
        );
        // Outside its version range the struct is neither written nor read.
        let b = encode(&blob, v(0, false));
        assert_eq!(b.len(), 10);
        assert_eq!(
            Blob::read(&mut Reader::new(&b), v(0, false)).unwrap().inner,
            None
        );
    }

    #[test]
    fn null_where_bytes_are_required_and_truncated_bytes_are_errors() {
        let b = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(Blob::read(&mut Reader::new(&b), v(0, false)).is_err());
        let b = [0, 0, 0, 0];
        assert!(Blob::read(&mut Reader::new(&b), v(0, true)).is_err());
        let full = encode(
            &Blob {
                data: Bytes(vec![1, 2, 3]),
                maybe: Some(Bytes(vec![4])),
                inner: Some(Inner::default()),
            },
            v(1, false),
        );
        for cut in 0..full.len() {
            assert!(
                Blob::read(&mut Reader::new(&full[..cut]), v(1, false)).is_err(),
                "cut at {cut}"
            );
        }
        // A length far beyond what is left is rejected before anything is copied.
        let b = [0x7f, 0xff, 0xff, 0xff, 1];
        let e = Blob::read(&mut Reader::new(&b), v(0, false)).unwrap_err();
        assert_eq!(
            e.kind(),
            &crate::protocol::wire::DecodeErrorKind::BadLength(i32::MAX as i64)
        );
    }

    #[test]
    fn uuid_displays_like_kafka() {
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid([0xff; 16]).to_string(), "_____________________w");
    }
}
