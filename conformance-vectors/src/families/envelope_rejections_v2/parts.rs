//! The base envelope's wire form: where its fields are, and the field replaced.

use sdk_orb::envelope::{EnvelopeView, V2};
use sdk_orb::PartyId;

use super::super::envelope_rejections::{offset_of, varint};
use crate::envelope::Pb;

/// The base envelope and where its fields are.
pub(super) struct Parts<'a> {
    pub(super) base: &'a [u8],
    pub(super) view: EnvelopeView<'a, V2>,
    pub(super) top: Vec<Field>,
}

impl<'a> Parts<'a> {
    pub(super) fn of(base: &'a [u8]) -> Result<Parts<'a>, String> {
        Ok(Parts {
            base,
            view: EnvelopeView::parse_v2(base).map_err(|e| e.to_string())?,
            top: fields(base)?,
        })
    }

    pub(super) fn enc_at(&self, p: usize) -> usize {
        offset_of(
            self.base,
            self.view.payload(PartyId::ALL[p]).encapsulated_key,
        )
    }

    pub(super) fn ct_at(&self, p: usize) -> usize {
        offset_of(self.base, self.view.payload(PartyId::ALL[p]).ciphertext)
    }

    /// The field of party `p`'s sealed payload.
    pub(super) fn slot(&self, p: usize) -> &Field {
        self.top
            .iter()
            .filter(|f| f.number == 8)
            .nth(p)
            .unwrap_or_else(|| unreachable!("a parsed envelope has three payloads"))
    }

    /// The base with party 2's sealed payload holding `enc` and `ct`.
    pub(super) fn with_payload2(&self, enc: &[u8], ct: &[u8]) -> Vec<u8> {
        let mut pb = Pb::default();
        pb.uint(1, 2).bytes(2, enc).bytes(3, ct);
        replace(self.base, self.slot(2), 8, &pb.0)
    }
}

/// A top-level protobuf field: where its tag, its content and the field end.
pub(super) struct Field {
    pub(super) number: u64,
    pub(super) start: usize,
    pub(super) content: usize,
    pub(super) end: usize,
}

/// The fields of `b` (varint and length-delimited only).
pub(super) fn fields(b: &[u8]) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let (tag, n) = varint(&b[at..]).ok_or("tag")?;
        let content = at + n;
        let (content, end) = match tag & 7 {
            0 => (content, content + varint(&b[content..]).ok_or("varint")?.1),
            2 => {
                let (len, m) = varint(&b[content..]).ok_or("length")?;
                (content + m, content + m + len as usize)
            }
            t => return Err(format!("wire type {t}")),
        };
        out.push(Field {
            number: tag >> 3,
            start: at,
            content,
            end,
        });
        at = end;
    }
    Ok(out)
}

/// `b` with the field `f` replaced by the length-delimited field `number` holding `content`.
pub(super) fn replace(b: &[u8], f: &Field, number: u8, content: &[u8]) -> Vec<u8> {
    let mut out = b[..f.start].to_vec();
    out.extend_from_slice(&Pb::default().bytes(number, content).0);
    out.extend_from_slice(&b[f.end..]);
    out
}

/// The name of a top-level envelope field.
pub(super) fn field_name(number: u64, slot: usize) -> String {
    match number {
        1 => "version".to_string(),
        2 => "request_id".to_string(),
        3 => "request_type".to_string(),
        4 => "timestamp_ms".to_string(),
        5 => "serial_id".to_string(),
        6 => "or_policy".to_string(),
        7 => "orb_key".to_string(),
        8 => format!("payload of party {slot}"),
        _ => "signature".to_string(),
    }
}
