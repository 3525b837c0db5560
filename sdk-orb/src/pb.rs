//! Just enough protobuf wire format for the envelope, without an allocator.
//!
//! Writing is canonical proto3 (fields in number order, zero scalars omitted), which is what
//! prost produces. Reading is strict: fields must come in increasing number order, each at
//! most once, with the expected wire type; anything else is malformed. So one message has
//! exactly one accepted encoding.

/// Wire type of varint fields.
pub(crate) const VARINT: u8 = 0;
/// Wire type of length-delimited fields.
pub(crate) const LEN: u8 = 2;

/// Bytes of `v` as a varint.
pub(crate) const fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Bytes of a non-zero varint field (zero fields are omitted).
pub(crate) const fn uint_field_len(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + varint_len(v)
    }
}

/// Bytes of a length-delimited field with `len` bytes of content.
pub(crate) const fn len_field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// A cursor over a buffer already checked to be large enough.
pub(crate) struct Writer<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Writer<'a> {
        Writer { buf, pos: 0 }
    }

    fn byte(&mut self, b: u8) {
        self.buf[self.pos] = b;
        self.pos += 1;
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    fn key(&mut self, field: u8, wire_type: u8) {
        self.byte((field << 3) | wire_type);
    }

    /// A varint field, omitted when zero.
    pub(crate) fn uint(&mut self, field: u8, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    /// The key and length of a length-delimited field; the caller writes `len` bytes next.
    pub(crate) fn len_prefix(&mut self, field: u8, len: usize) {
        self.key(field, LEN);
        self.varint(len as u64);
    }

    /// A length-delimited field; returns where its content starts.
    pub(crate) fn bytes(&mut self, field: u8, content: &[u8]) -> usize {
        self.len_prefix(field, content.len());
        let start = self.pos;
        self.buf[start..start + content.len()].copy_from_slice(content);
        self.pos += content.len();
        start
    }

    /// Reserves a length-delimited field of `len` bytes; returns where its content starts.
    pub(crate) fn reserve(&mut self, field: u8, len: usize) -> usize {
        self.len_prefix(field, len);
        let start = self.pos;
        self.pos += len;
        start
    }
}

/// A decoded field value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Why bytes are not a canonical message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    Truncated,
    VarintOverflow,
    UnsupportedWireType,
    FieldOrder,
    UnknownField,
    WrongWireType,
}

impl WireError {
    pub(crate) const fn describe(self) -> &'static str {
        match self {
            WireError::Truncated => "truncated protobuf",
            WireError::VarintOverflow => "protobuf varint too long",
            WireError::UnsupportedWireType => "unsupported protobuf wire type",
            WireError::FieldOrder => "protobuf fields repeated or out of order",
            WireError::UnknownField => "unknown protobuf field",
            WireError::WrongWireType => "protobuf field has the wrong wire type",
        }
    }
}

/// Strict reader of one message's fields.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    last_field: u32,
    /// Field numbers that may repeat (consecutively).
    repeated: &'static [u32],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], repeated: &'static [u32]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            last_field: 0,
            repeated,
        }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(WireError::Truncated)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(WireError::VarintOverflow);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                // Canonical varints have no redundant trailing zero group.
                if i > 0 && b == 0 {
                    return Err(WireError::VarintOverflow);
                }
                return Ok(v);
            }
        }
        Err(WireError::VarintOverflow)
    }

    /// The next field, or `None` at the end. `max_field` is the highest known field number.
    pub(crate) fn next(&mut self, max_field: u32) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| WireError::UnknownField)?;
        if field == 0 || field > max_field {
            return Err(WireError::UnknownField);
        }
        let repeat_ok = field == self.last_field && self.repeated.contains(&field);
        if field < self.last_field || (field == self.last_field && !repeat_ok) {
            return Err(WireError::FieldOrder);
        }
        self.last_field = field;
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(self.varint()?),
            LEN => {
                let len = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
                let end = self.pos.checked_add(len).ok_or(WireError::Truncated)?;
                let bytes = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
                self.pos = end;
                Value::Bytes(bytes)
            }
            _ => return Err(WireError::UnsupportedWireType),
        };
        Ok(Some((field, value)))
    }
}

impl Value<'_> {
    pub(crate) fn varint(self) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            Value::Bytes(_) => Err(WireError::WrongWireType),
        }
    }
}

impl<'a> Value<'a> {
    pub(crate) fn bytes(self) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            Value::Varint(_) => Err(WireError::WrongWireType),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths() {
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(25_600), 3);
        assert_eq!(varint_len(u64::MAX), 10);
    }

    #[test]
    fn varints_round_trip_and_non_canonical_ones_are_rejected() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut buf = [0u8; 11];
            let mut w = Writer::new(&mut buf);
            w.key(1, VARINT);
            w.varint(v);
            let n = w.pos;
            assert_eq!(n, 1 + varint_len(v));
            let mut r = Reader::new(&buf[..n], &[]);
            let (f, val) = r.next(1).expect("valid").expect("one field");
            assert_eq!(f, 1);
            assert_eq!(val.varint(), Ok(v));
        }
        // 1 encoded with a redundant zero group.
        let mut r = Reader::new(&[0x08, 0x81, 0x00], &[]);
        assert_eq!(r.next(1).err(), Some(WireError::VarintOverflow));
    }

    #[test]
    fn fields_out_of_order_repeated_or_unknown_are_rejected() {
        let mut r = Reader::new(&[0x10, 0x01, 0x08, 0x01], &[]);
        assert!(r.next(2).is_ok());
        assert_eq!(r.next(2).err(), Some(WireError::FieldOrder));
        let mut r = Reader::new(&[0x08, 0x01, 0x08, 0x01], &[]);
        assert!(r.next(2).is_ok());
        assert_eq!(r.next(2).err(), Some(WireError::FieldOrder));
        let mut r = Reader::new(&[0x18, 0x01], &[]);
        assert_eq!(r.next(2).err(), Some(WireError::UnknownField));
        let mut r = Reader::new(&[0x0a, 0x05, 0x01], &[]);
        assert_eq!(r.next(2).err(), Some(WireError::Truncated));
    }
}
