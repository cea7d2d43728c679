//! The stored form of a vector: little-endian IEEE half precision, `2 × dim` bytes. Vectors
//! are L2-normalised, so every component lies in [-1, 1], where half precision keeps 11
//! significant bits — a cosine within about 1e-3 of the f32 one, for half the bytes of
//! f32. Bytes written per vector are what a rebuild's storage cost grows with. Blobs of
//! `4 × dim` bytes (little-endian f32, written before half precision) still decode.

/// Encode for storage: half precision, rounded to nearest (ties to even).
pub fn encode_vector(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * 2];
    for (slot, x) in out.chunks_exact_mut(2).zip(v) {
        slot.copy_from_slice(&f32_to_f16(*x).to_le_bytes());
    }
    out
}

/// Decode a stored blob of `dim` components: half precision (`2 × dim` bytes) or f32
/// (`4 × dim`); `None` for any other length.
pub fn decode_vector(bytes: &[u8], dim: usize) -> Option<Vec<f32>> {
    if dim > 0 && bytes.len() == dim * 2 {
        Some(bytes.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect())
    } else if dim > 0 && bytes.len() == dim * 4 {
        Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    } else {
        None
    }
}

/// f32 → IEEE 754 binary16, round to nearest even; overflow gives ±infinity, NaN stays NaN.
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff;
    // The common case, a half-precision normal (2^-14 ≤ |x| < 65520): round the mantissa
    // at bit 13 (a carry moves into the exponent) and rebias the exponent by 127 − 15.
    if (0x3880_0000..0x477f_f000).contains(&abs) {
        let rounded = abs + 0x0fff + ((abs >> 13) & 1);
        return ((bits >> 16) & 0x8000) as u16 | ((rounded - 0x3800_0000) >> 13) as u16;
    }
    f32_to_f16_general(x)
}

/// Every case, bit by bit (subnormals, zero, overflow, infinity, NaN).
fn f32_to_f16_general(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal in half precision (or zero): shift the full significand down.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let rounded = m + (1 << (shift - 1)) - 1 + ((m >> shift) & 1);
        return sign | (rounded >> shift) as u16;
    }
    // A carry out of the mantissa moves into the exponent, up to infinity: both correct.
    let m = man + 0x0fff + ((man >> 13) & 1);
    sign | (((e as u32) << 10) + (m >> 13)) as u16
}

/// IEEE 754 binary16 → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            let shift = man.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | (((man << shift) & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::{cosine, hashing_embed};

    #[test]
    fn every_half_value_round_trips_exactly() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_one() {
        // Every f32 exponent and sign, with mantissas across the range and at rounding
        // boundaries.
        for high in 0..=0x1ffu32 {
            for low in (0..0x80_0000u32)
                .step_by(4093)
                .chain([0, 0xfff, 0x1000, 0x1fff, 0x2000, 0x7f_efff, 0x7f_f000, 0x7f_ffff])
            {
                let x = f32::from_bits(high << 23 | low);
                let (fast, general) = (f32_to_f16(x), f32_to_f16_general(x));
                assert!(
                    fast == general || (x.is_nan() && f16_to_f32(fast).is_nan()),
                    "{x:e}: {fast:#x} vs {general:#x}"
                );
            }
        }
    }

    #[test]
    fn known_values_and_rounding() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(0.0), 0);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001, "the smallest subnormal");
        assert_eq!(f32_to_f16(1e-9), 0);
        // Halfway between 1 and the next half (1 + 2^-10): ties go to the even mantissa.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        // Just above halfway rounds up.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 0x3c01);
    }

    #[test]
    fn relative_error_is_within_half_an_ulp() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let x = (rng >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            let back = f16_to_f32(f32_to_f16(x));
            if x.abs() >= 6.104e-5 {
                assert!(((back - x) / x).abs() <= 2f32.powi(-11), "{x} -> {back}");
            } else {
                assert!((back - x).abs() <= 2f32.powi(-25), "{x} -> {back}");
            }
        }
    }

    #[test]
    fn stored_vectors_keep_their_cosines() {
        let a = hashing_embed("rust async runtime tokio scheduler work stealing", 256);
        let b = hashing_embed("the tokio scheduler steals work across threads", 256);
        let (da, db) =
            (decode_vector(&encode_vector(&a), 256).unwrap(), decode_vector(&encode_vector(&b), 256).unwrap());
        assert_eq!(encode_vector(&a).len(), 512);
        assert!((cosine(&da, &db) - cosine(&a, &b)).abs() < 1e-3);
        assert!((cosine(&da, &a) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn decodes_both_stored_forms_and_rejects_other_lengths() {
        let v = vec![0.5f32, -0.25, 0.125];
        assert_eq!(decode_vector(&encode_vector(&v), 3).unwrap(), v);
        let f32_blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_vector(&f32_blob, 3).unwrap(), v);
        assert!(decode_vector(&f32_blob[..5], 3).is_none());
        assert!(decode_vector(&f32_blob, 4).is_none());
        assert!(decode_vector(&[], 0).is_none());
    }
}
