//! Column coding for stored hours ([`crate::chunk`]): varints, zigzag, bit
//! packing, the decimal form of a column of doubles and XOR coding of the
//! doubles that have none. Every decoder takes arbitrary bytes and returns
//! `None` instead of panicking; every double comes back bit for bit.
//!
//! A column of values is coded in one of two ways, chosen per column:
//! - **decimal**: when every value is exactly `n / 10^k` for one `k` in
//!   `0..=MAX_K` with `|n| < 10^15`, the integers `n` are stored as the
//!   first one and then the differences, each zigzag-coded, either as
//!   LEB128 varints or bit-packed at one width, whichever is smaller (or
//!   nothing at all when every difference is zero);
//! - otherwise, whichever is smaller of **XOR** (the first double's 8
//!   bytes, then for each next one its XOR with the one before, as a
//!   control byte naming its leading and trailing zero bytes and the bytes
//!   in between: Gorilla's idea, on byte boundaries so that decoding stays
//!   a few shifts per value) and **bits** (the first double's 8 bytes, then
//!   the differences of the bit patterns, zigzag-coded and bit-packed).

use crate::StoredValue;

#[path = "codec_form.rs"]
mod form;
pub(crate) use form::{DecimalForm, IntsSummary};

/// Powers of ten that are exact doubles, by exponent.
const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
/// Largest number of decimals a decimal column has.
pub(crate) const MAX_K: u8 = 12;
/// Largest |n| of a decimal: exact in a double, and below the magnitude
/// (1e16) where JSON printers switch to an exponent.
const MAX_DIGITS: f64 = 1.0e15;

/// Mode byte of a column: decimal columns carry `k` in the low nibble and
/// the coding of their differences in the high one; `XOR` is a column of
/// raw doubles.
const CONSTANT: u8 = 0x00;
const VARINT: u8 = 0x10;
const PACKED: u8 = 0x20;
const XOR: u8 = 0xF0;
/// A column of raw doubles as the differences of their bit patterns,
/// zigzag-coded and bit-packed: a walk of doubles without a decimal form
/// (`x / 3`) changes only its low mantissa bits, which XOR leaves in whole
/// bytes but a difference packs to the bit.
const BITS: u8 = 0xF1;

/// Appends `x` as a LEB128 varint.
pub(crate) fn write_varint(mut x: u64, out: &mut Vec<u8>) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Bytes that [`write_varint`] takes for `x`.
fn varint_len(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

pub(crate) fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

pub(crate) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// A cursor over bytes being decoded.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn is_done(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// A LEB128 varint of at most ten bytes.
    pub(crate) fn varint(&mut self) -> Option<u64> {
        let mut x = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            x |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(x);
            }
        }
        None
    }

    /// A varint that must fit in `usize` and be at most `max`.
    pub(crate) fn count(&mut self, max: usize) -> Option<usize> {
        usize::try_from(self.varint()?).ok().filter(|n| *n <= max)
    }
}

/// A column's decimal form: its decimals `k` and each value as `n` of `n / 10^k`.
pub(crate) type Decimal = (u8, Vec<i64>);

/// `v` as `n / 10^k` with `|n| < 10^15`, if that gives back `v` bit for bit.
fn scaled(v: f64, k: u8) -> Option<i64> {
    let p = POW10[usize::from(k)];
    let n = round_half_away(v * p)?;
    // Decode from the integer as the reader will (so -0.0 has no decimal form).
    ((n.unsigned_abs() as f64) < MAX_DIGITS && (n as f64 / p).to_bits() == v.to_bits()).then_some(n)
}

/// `x` rounded half away from zero, as `f64::round` does, when that is
/// below 10^15 in magnitude (else, and for NaN, `None`). Without SSE4.1
/// `f64::round` is a call into software rounding, a third of encoding an
/// hour; here it is a truncating conversion and one exact subtraction
/// (below 2^52 the fraction `x - trunc(x)` is exact).
fn round_half_away(x: f64) -> Option<i64> {
    if x.is_nan() || x.abs() >= MAX_DIGITS {
        return None;
    }
    let t = x as i64;
    let frac = x - t as f64;
    Some(if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    })
}

/// The integers of `values` at the fewest decimals that hold them all, or
/// `None` if some value has no decimal form (stores keep it as the values
/// come: [`DecimalForm`]).
#[cfg(test)]
pub(crate) fn decimal_column(values: &[f64]) -> Option<Decimal> {
    DecimalForm::of(values).get().cloned()
}

/// Appends a column of values (at least one), finding its decimal form
/// first; the store keeps each column's form as its values come
/// ([`DecimalForm`]) and calls [`encode_column_as`].
#[cfg(test)]
pub(crate) fn encode_column(values: &[f64], out: &mut Vec<u8>) {
    encode_column_as(values, decimal_column(values).as_ref(), out);
}

/// Appends a column of values (at least one) whose decimal form
/// ([`DecimalForm`]) is `decimal`.
pub(crate) fn encode_column_as(values: &[f64], decimal: Option<&Decimal>, out: &mut Vec<u8>) {
    match decimal {
        Some((k, ints)) => encode_ints(*k, ints, out),
        None => {
            let start = out.len();
            encode_xor(values, out);
            let bits: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            let deltas: Vec<u64> = bits.windows(2).map(|w| zigzag(w[1].wrapping_sub(w[0]) as i64)).collect();
            let width = 64 - deltas.iter().fold(0, |a, d| a | d).leading_zeros() as usize;
            if 1 + 8 + 1 + (deltas.len() * width).div_ceil(8) < out.len() - start {
                out.truncate(start);
                out.push(BITS);
                out.extend_from_slice(&bits[0].to_le_bytes());
                out.push(width as u8);
                pack(&deltas, width, out);
            }
        }
    }
}

fn encode_ints(k: u8, ints: &[i64], out: &mut Vec<u8>) {
    let deltas: Vec<u64> = ints.windows(2).map(|w| zigzag(w[1] - w[0])).collect();
    let first = zigzag(ints.first().copied().unwrap_or(0));
    let widest = deltas.iter().fold(0, |a, d| a | d);
    if widest == 0 {
        out.push(CONSTANT | k);
        write_varint(first, out);
        return;
    }
    let width = 64 - widest.leading_zeros() as usize;
    let packed_len = 1 + (deltas.len() * width).div_ceil(8);
    let varint_total: usize = deltas.iter().map(|d| varint_len(*d)).sum();
    if packed_len < varint_total {
        out.push(PACKED | k);
        write_varint(first, out);
        out.push(width as u8);
        pack(&deltas, width, out);
    } else {
        out.push(VARINT | k);
        write_varint(first, out);
        for d in deltas {
            write_varint(d, out);
        }
    }
}

/// Appends `values` at `width` bits each, least significant bits first.
fn pack(values: &[u64], width: usize, out: &mut Vec<u8>) {
    let (mut acc, mut bits) = (0u128, 0usize);
    for &v in values {
        acc |= u128::from(v) << bits;
        bits += width;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
}

fn encode_xor(values: &[f64], out: &mut Vec<u8>) {
    out.push(XOR);
    let mut prev = 0u64;
    for (i, v) in values.iter().enumerate() {
        let bits = v.to_bits();
        if i == 0 {
            out.extend_from_slice(&bits.to_le_bytes());
        } else {
            let x = bits ^ prev;
            if x == 0 {
                out.push(0);
            } else {
                let lead = (x.leading_zeros() / 8) as usize;
                let trail = (x.trailing_zeros() / 8) as usize;
                out.push((1 + lead * 8 + trail) as u8);
                out.extend_from_slice(&(x >> (trail * 8)).to_le_bytes()[..8 - lead - trail]);
            }
        }
        prev = bits;
    }
}

/// Decodes a column of `m` values (at least one), appending them to `out`.
pub(crate) fn decode_column(r: &mut Reader<'_>, m: usize, out: &mut Vec<StoredValue>) -> Option<()> {
    let mode = r.byte()?;
    if mode == XOR {
        return decode_xor(r, m, out);
    }
    if mode == BITS {
        return decode_bits(r, m, out);
    }
    let k = mode & 0x0f;
    if k > MAX_K {
        return None;
    }
    let mut n = unzigzag(r.varint()?);
    let mut push = |n: i64| {
        // Digits beyond 15 or an overflow mean damage, not a value.
        (n.unsigned_abs() < 1_000_000_000_000_000).then(|| out.push(decimal(n, k)))
    };
    push(n)?;
    match mode & 0xf0 {
        CONSTANT => {
            for _ in 1..m {
                push(n)?;
            }
        }
        VARINT => {
            for _ in 1..m {
                n = n.checked_add(unzigzag(r.varint()?))?;
                push(n)?;
            }
        }
        PACKED => {
            let mut deltas = Unpacked::new(r, m - 1)?;
            for _ in 1..m {
                n = n.checked_add(unzigzag(deltas.next()?))?;
                push(n)?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// Values packed at one width (a byte, then the bits), read one by one.
struct Unpacked<'a> {
    bytes: &'a [u8],
    width: usize,
    acc: u128,
    bits: usize,
    next: usize,
}

impl<'a> Unpacked<'a> {
    /// The `count` values that follow in `r`.
    fn new(r: &mut Reader<'a>, count: usize) -> Option<Self> {
        // Width 0: every value is zero.
        let width = usize::from(r.byte()?);
        if width > 64 {
            return None;
        }
        let bytes = r.take(count.checked_mul(width)?.div_ceil(8))?;
        Some(Self { bytes, width, acc: 0, bits: 0, next: 0 })
    }

    fn next(&mut self) -> Option<u64> {
        while self.bits < self.width {
            self.acc |= u128::from(*self.bytes.get(self.next)?) << self.bits;
            self.next += 1;
            self.bits += 8;
        }
        let mask = if self.width == 64 { u64::MAX } else { (1u64 << self.width) - 1 };
        let v = self.acc as u64 & mask;
        self.acc >>= self.width;
        self.bits -= self.width;
        Some(v)
    }
}

fn decode_bits(r: &mut Reader<'_>, m: usize, out: &mut Vec<StoredValue>) -> Option<()> {
    let mut bits = u64::from_le_bytes(*r.take(8)?.first_chunk::<8>()?);
    let mut deltas = if m > 1 { Some(Unpacked::new(r, m - 1)?) } else { None };
    for i in 0..m {
        if i > 0 {
            bits = bits.wrapping_add(unzigzag(deltas.as_mut()?.next()?) as u64);
        }
        let v = f64::from_bits(bits);
        if !v.is_finite() {
            return None;
        }
        out.push(StoredValue::Float(v));
    }
    Some(())
}

/// `n / 10^k` with trailing zero digits dropped, so that `k` is the fewest
/// decimals of the value (what [`StoredValue::write_json`] expects).
fn decimal(mut n: i64, mut k: u8) -> StoredValue {
    while k > 0 && n % 10 == 0 {
        n /= 10;
        k -= 1;
    }
    StoredValue::Decimal { n, k }
}

/// `10^k` as a double, for `k` in `0..=15`.
pub(crate) fn pow10(k: u8) -> f64 {
    POW10[usize::from(k.min(15))]
}

fn decode_xor(r: &mut Reader<'_>, m: usize, out: &mut Vec<StoredValue>) -> Option<()> {
    let mut bits = u64::from_le_bytes(*r.take(8)?.first_chunk::<8>()?);
    for i in 0..m {
        if i > 0 {
            let control = usize::from(r.byte()?);
            if control > 0 {
                let (lead, trail) = ((control - 1) / 8, (control - 1) % 8);
                let len = 8usize.checked_sub(lead + trail).filter(|l| *l > 0)?;
                let mut word = [0u8; 8];
                word[..len].copy_from_slice(r.take(len)?);
                bits ^= u64::from_le_bytes(word) << (trail * 8);
            }
        }
        let v = f64::from_bits(bits);
        if !v.is_finite() {
            return None;
        }
        out.push(StoredValue::Float(v));
    }
    Some(())
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
