//! Reference model of [`super::Follower`] for the property tests and the fuzz target: the same
//! rules written the plain way, over the whole buffer at once with indices and allocation.
//! Compiled only for tests and `cargo fuzz` (`cfg(fuzzing)`).

use super::{opcode, Close, GiveUp, MAX_PAYLOAD};

/// What the model read from a whole buffer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Each whole frame: (offset after it, opcode, a data message still open after it).
    pub ends: Vec<(usize, u8, bool)>,
    /// Where it stopped following, if it did.
    pub gave_up: Option<GiveUp>,
    /// The Close frame seen, if one ended.
    pub close: Option<Close>,
    /// The buffer ends exactly after a whole frame.
    pub at_frame_end: bool,
    /// A data message is open at the end.
    pub in_message: bool,
}

/// Follows `buf` as one direction's frames (see [`super::Follower::new`] for the flags).
pub fn follow(buf: &[u8], masked: bool, deflate: bool) -> Outcome {
    let mut out = Outcome::default();
    let mut p = 0usize;
    loop {
        if p == buf.len() {
            out.at_frame_end = true;
            return out;
        }
        let Some(&[b0, b1]) = buf.get(p..p + 2).map(|s| <&[u8; 2]>::try_from(s).unwrap()) else {
            return out;
        };
        let fin = b0 & 0x80 != 0;
        let rsv1 = b0 & 0x40 != 0;
        let rsv23 = b0 & 0x30 != 0;
        let op = b0 & 0x0F;
        let mask_bit = b1 & 0x80 != 0;
        let len7 = u64::from(b1 & 0x7F);
        let is_control = op >= 8;
        let bad = if out.close.is_some() {
            Some(GiveUp::AfterClose)
        } else if ![0, 1, 2, 8, 9, 10].contains(&op) {
            Some(GiveUp::ReservedOpcode)
        } else if rsv23 || (rsv1 && !(deflate && (op == 1 || op == 2))) {
            Some(GiveUp::Reserved)
        } else if mask_bit != masked {
            Some(GiveUp::Mask)
        } else if is_control && !fin {
            Some(GiveUp::FragmentedControl)
        } else if is_control && len7 > 125 {
            Some(GiveUp::ControlTooLong)
        } else if !is_control && (op == 0) != out.in_message {
            Some(GiveUp::Fragmentation)
        } else {
            None
        };
        if bad.is_some() {
            out.gave_up = bad;
            return out;
        }
        let ext_len = match len7 {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let key_len = if masked { 4 } else { 0 };
        let head_len = 2 + ext_len + key_len;
        if buf.len() < p + head_len {
            return out;
        }
        let ext = &buf[p + 2..p + 2 + ext_len];
        let len = ext
            .iter()
            .fold(if ext_len == 0 { len7 } else { 0 }, |n, &b| {
                (n << 8) | u64::from(b)
            });
        let shortest = match ext_len {
            2 => len >= 126,
            8 => len > 0xFFFF,
            _ => true,
        };
        if !shortest || len >> 63 == 1 || len > MAX_PAYLOAD {
            out.gave_up = Some(GiveUp::Length);
            return out;
        }
        if op == opcode::CLOSE && len == 1 {
            out.gave_up = Some(GiveUp::CloseBody);
            return out;
        }
        let key: Vec<u8> = buf[p + 2 + ext_len..p + head_len].to_vec();
        let start = p + head_len;
        if ((buf.len() - start) as u64) < len {
            return out;
        }
        let end = start + len as usize;
        if op == opcode::CLOSE {
            let payload: Vec<u8> = buf[start..end]
                .iter()
                .enumerate()
                .map(|(k, &b)| if masked { b ^ key[k % 4] } else { b })
                .collect();
            out.close = Some(Close {
                code: (payload.len() >= 2)
                    .then(|| u16::from(payload[0]) << 8 | u16::from(payload[1])),
            });
        } else if !is_control {
            out.in_message = !fin;
        }
        out.ends.push((end, op, out.in_message));
        p = end;
    }
}
