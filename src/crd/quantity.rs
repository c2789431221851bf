//! Kubernetes quantities (`4Gi`, `512Mi`, `1.5G`, `1e9`) to the MiB Slurm counts memory in.

/// Why a quantity could not be used as memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (e.g. 4Gi, 512Mi, 1G)")]
    Syntax(String),
    #[error("{0:?} must be positive")]
    NotPositive(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Bytes of a quantity, rounded up to a whole byte (memory has no fractions of a byte).
pub fn to_bytes(quantity: &str) -> Result<u128, QuantityError> {
    let text = quantity.trim();
    let syntax = || QuantityError::Syntax(quantity.to_owned());
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return Err(syntax());
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    // value = digits / 10^scale
    let digits: u128 = format!("{whole}{fraction}").parse().map_err(|_| syntax())?;
    let scale = u32::try_from(fraction.len()).map_err(|_| syntax())?;
    let (multiplier, exponent10): (u128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        exp if exp.starts_with(['e', 'E']) => (1, exp[1..].parse::<i32>().map_err(|_| syntax())?),
        _ => return Err(syntax()),
    };
    let too_large = || QuantityError::TooLarge(quantity.to_owned());
    let mut numerator = digits.checked_mul(multiplier).ok_or_else(too_large)?;
    let mut denominator: u128 = 10u128.checked_pow(scale).ok_or_else(too_large)?;
    if exponent10 >= 0 {
        let factor = 10u128
            .checked_pow(exponent10.unsigned_abs())
            .ok_or_else(too_large)?;
        numerator = numerator.checked_mul(factor).ok_or_else(too_large)?;
    } else {
        let factor = 10u128
            .checked_pow(exponent10.unsigned_abs())
            .ok_or_else(too_large)?;
        denominator = denominator.checked_mul(factor).ok_or_else(too_large)?;
    }
    let bytes = numerator.div_ceil(denominator);
    if bytes == 0 {
        return Err(QuantityError::NotPositive(quantity.to_owned()));
    }
    Ok(bytes)
}

/// Whole MiB, rounded up (a job asking for 1.5Mi gets 2 MiB, never less than asked).
pub fn to_mib_ceil(quantity: &str) -> Result<u64, QuantityError> {
    let mib = to_bytes(quantity)?.div_ceil(1 << 20);
    u64::try_from(mib).map_err(|_| QuantityError::TooLarge(quantity.to_owned()))
}

/// Whole MiB, rounded down (a node offering 1.5Mi offers 1 MiB).
pub fn to_mib_floor(quantity: &str) -> Result<u64, QuantityError> {
    let mib = to_bytes(quantity)? / (1 << 20);
    u64::try_from(mib).map_err(|_| QuantityError::TooLarge(quantity.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_mib() {
        let table = [
            ("4Gi", 4096, 4096),
            ("512Mi", 512, 512),
            ("1.5Gi", 1536, 1536),
            ("1G", 954, 953),
            ("1000M", 954, 953),
            ("1e9", 954, 953),
            ("1048576", 1, 1),
            ("1048577", 2, 1),
            ("2048Ki", 2, 2),
            ("1Ti", 1 << 20, 1 << 20),
            ("+3Mi", 3, 3),
            ("1500m", 1, 0),
        ];
        for (q, ceil, floor) in table {
            assert_eq!(to_mib_ceil(q), Ok(ceil), "{q} ceil");
            assert_eq!(to_mib_floor(q), Ok(floor), "{q} floor");
        }
    }

    #[test]
    fn bad_quantities_say_why() {
        for bad in ["", "Gi", "4GB", "4 Gi", "1.2.3Mi", "-1Gi", ".", "4Xi", "1e"] {
            assert!(
                matches!(to_bytes(bad), Err(QuantityError::Syntax(_))),
                "{bad:?}: {:?}",
                to_bytes(bad)
            );
        }
        assert!(matches!(to_bytes("0"), Err(QuantityError::NotPositive(_))));
        assert!(matches!(
            to_bytes("0Gi"),
            Err(QuantityError::NotPositive(_))
        ));
        assert!(matches!(to_bytes("1e400"), Err(QuantityError::TooLarge(_))));
        assert!(matches!(
            to_bytes("999999999999999999999Ei"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            to_mib_ceil("999999999999999Ei"),
            Err(QuantityError::TooLarge(_))
        ));
    }
}
