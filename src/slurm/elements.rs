//! A bound on what a response body may cost to decode, counted in its elements while it streams
//! in, before serde sees it. The byte limit alone is not enough: `{"jobs":[{},{},…]}` is three
//! bytes per job, and each `{}` decodes into a whole default-filled job record (about 3.2 KiB in
//! the generated and domain types, measured), so 32 MiB of it would be some 35 GiB.
//!
//! Each element is charged what it decodes to at most: an object in one of the answer's
//! top-level lists (`jobs`, `nodes`, `partitions`, …: a record) [`RECORD_COST`], or
//! [`SMALL_RECORD_COST`] for the few operations whose records are small; an object in a deeper
//! list [`NESTED_OBJECT_COST`]; any other list item [`VALUE_COST`]. An object that is a field's
//! value is part of its parent's record and costs nothing more. A body may cost
//! [`COST_PER_BYTE`] times its size (at least [`MIN_COST`]). Real answers are far from it:
//! slurmrestd writes every field of every record, so a real job record is kilobytes (the
//! recorded 24.11 and 26.05 answers cost 0.3–3 times their size, minified or not; a job with 64
//! allocated cores about 3 times) while `[{},{},…]` costs a thousand times its size.
//!
//! No crate fitted: streaming JSON parsers (json-event-parser, struson) decode every key, string
//! and number, while this needs only brackets, commas and where strings are.

/// What a record in a top-level list may decode to: an empty job record costs ~3.2 KiB, a node
/// ~1.4 KiB, a partition ~1 KiB (measured through `slurm::fuzzing::decode`).
pub const RECORD_COST: u64 = 4096;
/// What a record of `/jobs/state/` may decode to: a 48-byte entry (`slurm::job_states`), and
/// an empty one to nothing. A real one, such as `{"job_id":"3","state":["COMPLETED"]}`, is
/// under 40 bytes minified and costs 128 with its state.
pub const SMALL_RECORD_COST: u64 = 96;
/// An object in a list inside a record (a job's allocated nodes, sockets, cores; an empty
/// allocated node ~520 bytes, a core far less).
pub const NESTED_OBJECT_COST: u64 = 256;
/// Any other list item: a string, number or list (a `String` or `Vec` is 24 bytes).
pub const VALUE_COST: u64 = 32;
/// Decoding may cost this many times the body's bytes…
pub const COST_PER_BYTE: u64 = 4;
/// …or this much, for small bodies.
pub const MIN_COST: u64 = 1 << 20;

/// serde_json's recursion limit: nothing deeper is decoded, so nothing deeper is tracked.
const MAX_DEPTH: u32 = 128;

/// The operations whose records are small (the generated client's operation ids).
const SMALL_RECORDS: &[&str] = &["slurm_get_jobs_state"];

/// The decoding cost of a body seen so far, fed chunk by chunk. Constant memory: the nesting is
/// a bit per level.
#[derive(Debug, Clone)]
pub struct ElementBudget {
    record_cost: u64,
    cost: u64,
    bytes: u64,
    /// Bit `d` set: the container at depth `d` is a list.
    lists: u128,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The next non-blank byte starts a list item.
    item_next: bool,
}

impl ElementBudget {
    /// A budget for an answer to the generated client's operation `operation_id`.
    pub fn new(operation_id: &str) -> Self {
        let record_cost = if SMALL_RECORDS.contains(&operation_id) {
            SMALL_RECORD_COST
        } else {
            RECORD_COST
        };
        Self {
            record_cost,
            cost: 0,
            bytes: 0,
            lists: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            item_next: false,
        }
    }

    /// Account for the next `chunk` of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes = self.bytes.saturating_add(chunk.len() as u64);
        for &byte in chunk {
            if self.in_string {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            if byte.is_ascii_whitespace() {
                continue;
            }
            if std::mem::take(&mut self.item_next) && byte != b']' {
                self.charge_item(byte);
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.open(byte == b'['),
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' => self.item_next = self.in_list(),
                _ => {}
            }
        }
    }

    /// Whether the body so far costs more to decode than its size allows.
    pub fn exceeded(&self) -> bool {
        self.cost > self.allowed()
    }

    /// The bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn allowed(&self) -> u64 {
        self.bytes.saturating_mul(COST_PER_BYTE).max(MIN_COST)
    }

    fn in_list(&self) -> bool {
        (1..=MAX_DEPTH).contains(&self.depth) && self.lists & (1 << (self.depth - 1)) != 0
    }

    fn open(&mut self, list: bool) {
        self.depth = self.depth.saturating_add(1);
        if (1..=MAX_DEPTH).contains(&self.depth) {
            let bit = 1_u128 << (self.depth - 1);
            if list {
                self.lists |= bit;
            } else {
                self.lists &= !bit;
            }
        }
        self.item_next = list;
    }

    /// A list item starting with `first`, in the list at the current depth. Nothing deeper than
    /// serde_json's recursion limit is decoded (it refuses it, or skips it in an unknown field).
    fn charge_item(&mut self, first: u8) {
        if self.depth > MAX_DEPTH {
            return;
        }
        let cost = match first {
            // A list directly in the root object holds the answer's records.
            b'{' if self.depth == 2 && self.lists & 1 == 0 => self.record_cost,
            b'{' => NESTED_OBJECT_COST,
            _ => VALUE_COST,
        };
        self.cost = self.cost.saturating_add(cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(operation: &str, body: &[u8]) -> ElementBudget {
        let mut budget = ElementBudget::new(operation);
        // Fed in odd chunks: a state that spans chunks must carry over.
        for chunk in body.chunks(7) {
            budget.feed(chunk);
        }
        budget
    }

    #[test]
    fn elements_are_charged_by_what_they_decode_to() {
        let get_jobs = "slurm_get_jobs";
        let budget = cost(get_jobs, br#"{"jobs":[{"a":{"b":1}},{}],"meta":{}}"#);
        assert_eq!(budget.cost, 2 * RECORD_COST);
        let nested = cost(
            get_jobs,
            br#"{"jobs":[{"alloc":[{},{"s":[{}]}],"flags":["A","B"],"n":[1,[2]]}]}"#,
        );
        assert_eq!(
            nested.cost,
            RECORD_COST + 3 * NESTED_OBJECT_COST + 5 * VALUE_COST
        );
        let states = cost("slurm_get_jobs_state", br#"{"jobs":[{},{}]}"#);
        assert_eq!(states.cost, 2 * SMALL_RECORD_COST);
        // Brackets, commas and quotes inside strings are text.
        let text = cost(get_jobs, br#"{"jobs":[],"x":"[{},{\"]\",[{}]"}"#);
        assert_eq!(text.cost, 0);
        assert_eq!(cost(get_jobs, b"[]").cost, 0);
        assert_eq!(cost(get_jobs, b"[ ]").cost, 0);
        assert_eq!(cost(get_jobs, b"[ 1 , 2 ]").cost, 2 * VALUE_COST);
    }

    #[test]
    fn a_body_of_empty_records_is_refused() {
        let items = vec!["{}"; 10_000].join(",");
        let body = format!(r#"{{"jobs":[{items}]}}"#);
        let budget = cost("slurm_get_jobs", body.as_bytes());
        assert!(budget.exceeded(), "{budget:?}");
        // Nested empty objects, and lists of empty strings, likewise.
        let alloc = vec!["{}"; 10_000].join(",");
        let body =
            format!(r#"{{"jobs":[{{"job_resources":{{"nodes":{{"allocation":[{alloc}]}}}}}}]}}"#);
        assert!(cost("slurm_get_jobs", body.as_bytes()).exceeded());
        let strings = vec!["\"\""; 200_000].join(",");
        let body = format!(r#"{{"jobs":[{{"flags":[{strings}]}}]}}"#);
        assert!(cost("slurm_get_jobs", body.as_bytes()).exceeded());
    }

    #[test]
    fn deep_nesting_is_left_to_serde() {
        let body = "[".repeat(100_000) + &"]".repeat(100_000);
        let budget = cost("slurm_get_jobs", body.as_bytes());
        assert_eq!(budget.depth, 0, "{budget:?}");
        assert_eq!(budget.cost, u64::from(MAX_DEPTH) * VALUE_COST);
        assert!(!budget.exceeded());
    }

    /// Every recorded real answer (24.11 and 26.05), pretty as slurmrestd writes it and
    /// minified, alone and with its records repeated to 2 MiB (past [`MIN_COST`]).
    #[test]
    fn real_answers_are_accepted() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut seen = 0;
        for release in ["24.11", "26.05"] {
            for entry in std::fs::read_dir(format!("{dir}/{release}")).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
                let operation = if fixture["request"]["path"]
                    .as_str()
                    .is_some_and(|p| p.contains("/jobs/state"))
                {
                    "slurm_get_jobs_state"
                } else {
                    "slurm_get_jobs"
                };
                let body = &fixture["body"];
                let mut bodies = vec![body.clone()];
                // The same records many times over: a cluster with thousands of jobs.
                for list in ["jobs", "nodes", "partitions"] {
                    if let Some(records) = body[list].as_array().filter(|r| !r.is_empty()) {
                        let one = serde_json::to_vec(&records[0]).unwrap().len();
                        let times = (2 << 20) / one;
                        let mut many = body.clone();
                        many[list] = serde_json::Value::Array(
                            records.iter().cycle().take(times).cloned().collect(),
                        );
                        bodies.push(many);
                    }
                }
                for body in bodies {
                    for bytes in [
                        serde_json::to_vec_pretty(&body).unwrap(),
                        serde_json::to_vec(&body).unwrap(),
                    ] {
                        let budget = cost(operation, &bytes);
                        assert!(!budget.exceeded(), "{}: {budget:?}", path.display());
                        seen += 1;
                    }
                }
            }
        }
        assert!(seen > 200, "{seen} bodies");
    }
}
