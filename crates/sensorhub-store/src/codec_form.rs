//! A decimal column kept as its values come ([`DecimalForm`]): its decimal
//! form, and, once asked to keep it ([`DecimalForm::keep_coding`]), what
//! encoding the column needs of its integers (their summary, and their
//! differences as varints and bit-packed), so that an hour that live data
//! appends to encodes its new values, not every value of the hour again.
//! An hour encoded once (an import) keeps no coding and is coded afresh.
//! The bytes are [`super::encode_ints`]'s exactly.

use super::{Decimal, MAX_K, scaled, write_varint, zigzag};

/// A column's decimal form found value by value, as the values come (the
/// integers of every value so far at the fewest decimals that hold them
/// all, or none if some value has no decimal form): an hour that live data
/// appends to scales only its new values. Each value is scaled once while
/// the decimals hold, and those before again when a value needs more.
#[derive(Clone, Debug)]
pub(crate) struct DecimalForm {
    form: Option<Decimal>,
    /// Values taken when the decimals last rose or the form was lost: the
    /// form of the first `m >= decided` values is this one's first `m`.
    decided: usize,
    /// The form's integers as coded, in step with them while kept.
    coding: IntsCoding,
}

impl Default for DecimalForm {
    fn default() -> Self {
        Self { form: Some((0, Vec::new())), decided: 0, coding: IntsCoding::default() }
    }
}

impl DecimalForm {
    /// The form of `values`.
    pub(crate) fn of(values: &[f64]) -> Self {
        let mut form = Self::default();
        for i in 0..values.len() {
            form.push(&values[..=i]);
        }
        form
    }

    /// Takes the last of `values` (every value of the column so far, the
    /// ones before it already taken) into the form.
    pub(crate) fn push(&mut self, values: &[f64]) {
        let Some(((k, ints), (&v, before))) = self.form.as_mut().zip(values.split_last()) else { return };
        let mut raised = false;
        let n = loop {
            if let Some(n) = scaled(v, *k) {
                break n;
            }
            *k += 1;
            raised = true;
            if *k > MAX_K {
                self.form = None;
                self.decided = values.len();
                self.coding.clear();
                return;
            }
        };
        if raised {
            self.decided = values.len();
            self.coding.clear();
            for (at, &b) in ints.iter_mut().zip(before) {
                match scaled(b, *k) {
                    Some(m) => *at = m,
                    None => {
                        self.form = None;
                        return;
                    }
                }
            }
        }
        ints.push(n);
        if self.coding.kept {
            self.coding.take(ints);
        }
    }

    /// Keeps the coding of the integers from now on, in step with them as
    /// they come: built now if it is not (once for a kept hour, and again
    /// after its decimals rose or it was cut).
    pub(crate) fn keep_coding(&mut self) {
        let Some((_, ints)) = &self.form else { return };
        if !self.coding.kept || self.coding.taken != ints.len() {
            self.coding.clear();
            self.coding.take(ints);
            self.coding.kept = true;
        }
    }

    /// The form of `values`, the first of those taken: the same form cut
    /// short when nothing was decided after them, else found again.
    pub(crate) fn truncate(&mut self, values: &[f64]) {
        if values.len() < self.decided {
            *self = Self::of(values);
        } else if let Some((_, ints)) = &mut self.form
            && ints.len() > values.len()
        {
            ints.truncate(values.len());
            self.coding.clear();
        }
    }

    /// The form of the values taken, or `None` if some has none.
    #[cfg(test)]
    pub(crate) fn get(&self) -> Option<&Decimal> {
        self.form.as_ref()
    }

    /// Appends the column as [`super::encode_column_as`] codes it with this
    /// form: from the kept coding without going over the integers again,
    /// else afresh. `None` (nothing written) when the values have no
    /// decimal form.
    pub(crate) fn write_column(&self, out: &mut Vec<u8>) -> Option<()> {
        let (k, ints) = self.form.as_ref()?;
        match self.coding.kept && self.coding.taken == ints.len() {
            true => self.coding.write(*k, out),
            false => super::encode_ints(*k, ints, out),
        }
        Some(())
    }

    /// The first, smallest, largest and last integer and their sum, with
    /// the decimals; `None` when the values have no decimal form (or none
    /// were taken).
    pub(crate) fn summary(&self) -> Option<(u8, IntsSummary)> {
        let (k, ints) = self.form.as_ref()?;
        match self.coding.kept && self.coding.taken == ints.len() {
            true => (self.coding.taken > 0).then_some((*k, self.coding.summary)),
            false => IntsSummary::of(ints).map(|s| (*k, s)),
        }
    }

    /// Bytes held besides the values (by estimate), for a bound on kept hours.
    pub(crate) fn bytes_held(&self) -> usize {
        let ints = self.form.as_ref().map_or(0, |(_, ints)| 8 * ints.capacity());
        ints + self.coding.varints.capacity() + self.coding.packed.capacity()
    }
}

/// The first, smallest, largest and last of a column's integers, their sum
/// and count: what a decimal column's summary holds ([`crate::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IntsSummary {
    pub first: i64,
    pub min: i64,
    pub max: i64,
    pub last: i64,
    pub sum: i128,
    pub count: usize,
}

impl IntsSummary {
    /// The summary of `ints`; `None` for none.
    pub(crate) fn of(ints: &[i64]) -> Option<IntsSummary> {
        let (&first, &last) = (ints.first()?, ints.last()?);
        let (min, max) = ints.iter().fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let sum = ints.iter().map(|&v| i128::from(v)).sum();
        Some(IntsSummary { first, min, max, last, sum, count: ints.len() })
    }
}

/// What [`super::encode_ints`] writes of a column's integers, kept as they
/// come: the summary, and the differences both as LEB128 varints and
/// bit-packed at the width of the widest so far (repacked when a wider one
/// comes), so that writing the column is choosing one and copying it.
#[derive(Clone, Debug, Default)]
struct IntsCoding {
    /// Whether it is kept in step with the form as integers come.
    kept: bool,
    /// Integers taken; the coding is in step with the form when this is
    /// the form's count.
    taken: usize,
    summary: IntsSummary,
    /// The zigzag differences OR-ed together, and the width that packs them.
    widest: u64,
    width: usize,
    /// The differences as varints.
    varints: Vec<u8>,
    /// The differences packed at `width` bits: whole bytes, then the `bits`
    /// bits of the last one in `acc`.
    packed: Vec<u8>,
    acc: u128,
    bits: usize,
}

impl IntsCoding {
    /// Forgets every integer taken (the form's were scaled again or cut),
    /// until it is kept again.
    fn clear(&mut self) {
        self.kept = false;
        self.taken = 0;
        self.summary = IntsSummary::default();
        (self.widest, self.width, self.acc, self.bits) = (0, 0, 0, 0);
        self.varints.clear();
        self.packed.clear();
    }

    /// Takes the integers of `ints` after those already taken.
    fn take(&mut self, ints: &[i64]) {
        while self.taken < ints.len() {
            let (i, v) = (self.taken, ints[self.taken]);
            self.taken += 1;
            let s = &mut self.summary;
            if i == 0 {
                *s = IntsSummary { first: v, min: v, max: v, last: v, sum: i128::from(v), count: 1 };
                continue;
            }
            let d = zigzag(v - s.last);
            (s.min, s.max, s.last, s.count) = (s.min.min(v), s.max.max(v), v, s.count + 1);
            s.sum += i128::from(v);
            write_varint(d, &mut self.varints);
            self.widest |= d;
            let width = 64 - self.widest.leading_zeros() as usize;
            if width > self.width {
                self.repack(&ints[..self.taken], width);
            } else {
                self.pack(d);
            }
        }
    }

    /// Packs the differences of `ints` again at `width`.
    fn repack(&mut self, ints: &[i64], width: usize) {
        (self.width, self.acc, self.bits) = (width, 0, 0);
        self.packed.clear();
        for w in ints.windows(2) {
            self.pack(zigzag(w[1] - w[0]));
        }
    }

    /// Packs one difference, as [`super::pack`] does.
    fn pack(&mut self, d: u64) {
        self.acc |= u128::from(d) << self.bits;
        self.bits += self.width;
        while self.bits >= 8 {
            self.packed.push(self.acc as u8);
            self.acc >>= 8;
            self.bits -= 8;
        }
    }

    /// Appends the integers taken at `k` decimals, as [`super::encode_ints`] does.
    fn write(&self, k: u8, out: &mut Vec<u8>) {
        let first = zigzag(self.summary.first);
        if self.widest == 0 {
            out.push(super::CONSTANT | k);
            write_varint(first, out);
            return;
        }
        let differences = self.taken - 1;
        let packed_len = 1 + (differences * self.width).div_ceil(8);
        if packed_len < self.varints.len() {
            out.push(super::PACKED | k);
            write_varint(first, out);
            out.push(self.width as u8);
            out.extend_from_slice(&self.packed);
            if self.bits > 0 {
                out.push(self.acc as u8);
            }
        } else {
            out.push(super::VARINT | k);
            write_varint(first, out);
            out.extend_from_slice(&self.varints);
        }
    }
}
