//! Slurm's compact lists: hostlists (`"n[1-3,5],gpu01"`) and array task ranges (`"1,3-5%2"`).

/// At most this many names come out of one hostlist: a corrupt or hostile expression must not
/// make the poller allocate without bound (a job spans at most MaxNodeCount nodes anyway).
const MAX_HOSTS: usize = 65_536;
/// The longest node name an expression may make (a host name is at most 253 bytes): with the
/// number of names bounded only, zero padding or a prefix of a megabyte would make each of
/// 65 536 names a megabyte long.
const MAX_NAME_BYTES: usize = 253;
/// The most digits a number in brackets may have (a `u64` has 20; more are padding).
const MAX_DIGITS: usize = 20;

/// The node names of a Slurm hostlist: comma-separated elements, each literal text with bracket
/// groups of numbers and ranges (`"rack[1-2]-n[01-02]"` is the product, zero padding kept).
/// Malformed elements are taken literally rather than dropped.
pub fn expand(hostlist: &str) -> Vec<String> {
    let mut out = Vec::new();
    for element in split_top_level(hostlist) {
        let element = element.trim();
        if element.is_empty() {
            continue;
        }
        match expand_element(element, MAX_HOSTS.saturating_sub(out.len())) {
            Some(names) => out.extend(names),
            None => out.push(element.to_owned()),
        }
        if out.len() >= MAX_HOSTS {
            out.truncate(MAX_HOSTS);
            break;
        }
    }
    out
}

/// Split at commas that are not inside brackets.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts
}

/// One element, or `None` when it is not a well-formed expression (or expands beyond `limit`).
fn expand_element(element: &str, limit: usize) -> Option<Vec<String>> {
    let mut names = vec![String::new()];
    let mut rest = element;
    // The longest name so far: each name is checked before it is made.
    let mut longest = 0;
    while !rest.is_empty() {
        match rest.find('[') {
            None => {
                if longest + rest.len() > MAX_NAME_BYTES {
                    return None;
                }
                names.iter_mut().for_each(|n| n.push_str(rest));
                rest = "";
            }
            Some(open) => {
                let literal = &rest[..open];
                let close = open + rest[open..].find(']')?;
                let numbers = ranges(&rest[open + 1..close])?;
                longest += literal.len() + numbers.iter().map(String::len).max().unwrap_or(0);
                if longest > MAX_NAME_BYTES || names.len().checked_mul(numbers.len())? > limit {
                    return None;
                }
                names.iter_mut().for_each(|n| n.push_str(literal));
                names = names
                    .iter()
                    .flat_map(|prefix| numbers.iter().map(move |n| format!("{prefix}{n}")))
                    .collect();
                rest = &rest[close + 1..];
            }
        }
    }
    Some(names)
}

/// The numbers of a bracket body (`"01-03,7"` → `["01","02","03","7"]`), padding kept.
fn ranges(body: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for part in body.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((low, high)) => {
                let width = low.len();
                if width > MAX_DIGITS || high.len() > MAX_DIGITS {
                    return None;
                }
                let (a, b): (u64, u64) = (low.parse().ok()?, high.parse().ok()?);
                if b < a || b - a >= MAX_HOSTS as u64 {
                    return None;
                }
                out.extend((a..=b).map(|n| format!("{n:0width$}")));
            }
            None => {
                if part.len() > MAX_DIGITS {
                    return None;
                }
                part.parse::<u64>().ok()?;
                out.push(part.to_owned());
            }
        }
        if out.len() > MAX_HOSTS {
            return None;
        }
    }
    Some(out)
}

/// Array task ids as Slurm writes them: sorted, consecutive runs as ranges (`[1,3,4,5]` → `"1,3-5"`).
pub fn task_ranges(ids: &[u32]) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        let mut end = start;
        while i + 1 < ids.len() && ids[i + 1] == end + 1 {
            i += 1;
            end = ids[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand_like_slurm() {
        let table: &[(&str, &[&str])] = &[
            ("n1", &["n1"]),
            ("n[1-3]", &["n1", "n2", "n3"]),
            ("n[1-2,5]", &["n1", "n2", "n5"]),
            ("n[1-2],gpu01", &["n1", "n2", "gpu01"]),
            ("gpu[08-10]", &["gpu08", "gpu09", "gpu10"]),
            ("r[1-2]-n[1-2]", &["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
            ("drain-3f2a1b9c", &["drain-3f2a1b9c"]),
            ("a[1]b", &["a1b"]),
            ("", &[]),
            (" n1 , n2 ", &["n1", "n2"]),
            // Malformed: kept literally, never dropped or expanded wildly.
            ("n[1-", &["n[1-"]),
            ("n[3-1]", &["n[3-1]"]),
            ("n[x]", &["n[x]"]),
            ("n1]", &["n1]"]),
        ];
        for (list, want) in table {
            assert_eq!(expand(list), *want, "{list:?}");
        }
    }

    #[test]
    fn huge_hostlists_are_bounded() {
        assert_eq!(expand("n[0-4294967295]"), vec!["n[0-4294967295]"]);
        assert!(expand("a[0-300],b[0-300]").len() <= MAX_HOSTS);
        assert_eq!(expand("a[0-999]b[0-999]"), vec!["a[0-999]b[0-999]"]);
    }

    /// Bounded in bytes too, not only in names: zero padding or a long prefix made each of
    /// 65 536 names as long as the expression (a megabyte of zeros: 64 GiB).
    #[test]
    fn hostile_names_are_not_multiplied() {
        let bytes = |names: &[String]| names.iter().map(String::len).sum::<usize>();
        let padded = format!("n[{}-65535]", "0".repeat(100_000));
        let names = expand(&padded);
        assert!(bytes(&names) <= padded.len(), "{} bytes", bytes(&names));
        let prefixed = format!("{}[0-65535]", "n".repeat(100_000));
        let names = expand(&prefixed);
        assert!(bytes(&names) <= prefixed.len(), "{} bytes", bytes(&names));
        let suffixed = format!("n[0-65535]{}", "x".repeat(100_000));
        assert!(bytes(&expand(&suffixed)) <= suffixed.len());
        // Real names and padding stay as they were.
        assert_eq!(expand("gpu[0001-0002]"), ["gpu0001", "gpu0002"]);
        let long = format!("{}[1-2]", "r".repeat(240));
        assert_eq!(expand(&long).len(), 2);
    }

    #[test]
    fn task_ranges_are_compact() {
        let table: &[(&[u32], &str)] = &[
            (&[], ""),
            (&[3], "3"),
            (&[3, 4, 5], "3-5"),
            (&[5, 1, 3, 4], "1,3-5"),
            (&[0, 2, 4], "0,2,4"),
            (&[7, 7, 8], "7-8"),
        ];
        for (ids, want) in table {
            assert_eq!(task_ranges(ids), *want, "{ids:?}");
        }
    }
}
