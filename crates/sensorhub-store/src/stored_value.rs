//! A stored value: a short decimal kept as its digits and scale, or a float.

/// A value as stored: most sensor values are short decimals, kept as
/// `n / 10^k` so that they can be printed without a float-to-decimal search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoredValue {
    /// Exactly `n / 10^k`, with `|n| < 10^15`, `k` at most 15 and as small
    /// as possible (`n` has no trailing zero when `k > 0`).
    Decimal {
        /// The digits.
        n: i64,
        /// Digits after the decimal point.
        k: u8,
    },
    /// Any other finite value.
    Float(f64),
}

impl StoredValue {
    /// The value as a double (bit for bit the one stored): dividing by an
    /// exact power of ten is correctly rounded.
    pub fn to_f64(self) -> f64 {
        match self {
            StoredValue::Decimal { n, k } => n as f64 / crate::codec::pow10(k),
            StoredValue::Float(v) => v,
        }
    }
}

impl StoredValue {
    /// Appends the value exactly as serde_json writes the double (the
    /// shortest form that reads back the same). A stored decimal `n / 10^k`
    /// with the fewest decimals and fewer than 16 digits is that shortest
    /// form already, so it is printed from its digits without a
    /// float-to-decimal search (the readings endpoint's hot path), unless
    /// it is so small that serde_json writes an exponent (below 1e-5).
    pub fn write_json(self, out: &mut Vec<u8>) {
        match self {
            StoredValue::Decimal { n, k }
                if n == 0 || k == 0 || decimal_digits(n.unsigned_abs()) + 5 > u32::from(k) =>
            {
                if n < 0 {
                    out.push(b'-');
                }
                let abs = n.unsigned_abs();
                let pow = 10u64.pow(u32::from(k.min(15)));
                let mut int = itoa::Buffer::new();
                out.extend_from_slice(int.format(abs / pow).as_bytes());
                out.push(b'.');
                if k == 0 {
                    out.push(b'0');
                } else {
                    let frac = int.format(abs % pow).as_bytes();
                    out.extend(std::iter::repeat_n(b'0', usize::from(k).saturating_sub(frac.len())));
                    out.extend_from_slice(frac);
                }
            }
            // Finite (checked on the way in), so this cannot fail.
            v => {
                let _ = serde_json::to_writer(out, &v.to_f64());
            }
        }
    }
}

/// How many decimal digits `x` has (1 for 0).
fn decimal_digits(x: u64) -> u32 {
    x.checked_ilog10().map_or(1, |d| d + 1)
}

impl From<f64> for StoredValue {
    fn from(v: f64) -> Self {
        StoredValue::Float(v)
    }
}
