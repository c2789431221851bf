//! `slurm-operator sbatch`: a batch script with `#SBATCH` lines as a SlurmJob, so that existing
//! job scripts move over unchanged.
//!
//! slurmrestd does not read `#SBATCH` lines (only the sbatch command does), so every option has
//! to become a field of the SlurmJob. [`convert`] reads the lines as sbatch does and maps each
//! option it knows; whatever it cannot carry is listed in [`Conversion::unconverted`] with the
//! reason, never dropped; what it carries but runs otherwise than under sbatch (a relative
//! output file without a working directory) is in [`Conversion::caveats`].
//! [`SbatchArgs::run`] prints the SlurmJob as YAML or creates it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

use super::CliError;
use crate::controller::slurmjob::submit::DEFAULT_WORKING_DIRECTORY;
use crate::crd::SlurmJob;
use crate::crd::slurmjob::{DependencyType, Exclusive, JobDependency, SlurmJobSpec};
use crate::slurm::types::extra_option_refusal;

/// Why a script could not be read at all (as opposed to an option it could not carry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbatchError {
    #[error("the script must start with an interpreter line such as #!/bin/bash")]
    NoInterpreter,
    #[error("line {line}: unterminated quote in the #SBATCH line")]
    UnterminatedQuote { line: usize },
    /// sbatch refuses such a script, and bash on the nodes would fail on it
    /// (`/bin/bash^M: bad interpreter`).
    #[error(
        "line {line} ends in \\r\\n: the script has DOS line breaks, which sbatch refuses and \
         bash on the Slurm nodes cannot run; convert it to UNIX line breaks (\\n) first, e.g. \
         with dos2unix"
    )]
    DosLineBreaks { line: usize },
}

/// Where an option was written: on the sbatch command line (the words after `--`), or on an
/// `#SBATCH` line of the script. Ordered so that the command line's come first in a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    CommandLine,
    /// 1-based line of the script.
    Line(usize),
}

impl Origin {
    /// The script's line, if the option was on one.
    pub fn line(self) -> Option<usize> {
        match self {
            Origin::Line(line) => Some(line),
            Origin::CommandLine => None,
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::CommandLine => f.write_str("command line"),
            Origin::Line(line) => write!(f, "line {line}"),
        }
    }
}

/// An sbatch option the SlurmJob does not carry, with where it was and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconverted {
    pub origin: Origin,
    /// The option as written, e.g. `--mail-type=END`.
    pub option: String,
    pub reason: String,
}

impl std::fmt::Display for Unconverted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.origin, self.option, self.reason)
    }
}

/// An sbatch option carried by the spec whose effect differs from sbatch's, with where it
/// was and why: the job runs, but not as the script's author may expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caveat {
    pub origin: Origin,
    /// The option as written, e.g. `--output=logs/%j.out`.
    pub option: String,
    pub reason: String,
}

impl std::fmt::Display for Caveat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.origin, self.option, self.reason)
    }
}

/// A script's `#SBATCH` options as a SlurmJob spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub spec: SlurmJobSpec,
    /// Every option not carried by `spec`: the command line's first, then the script's, each in
    /// the order written.
    pub unconverted: Vec<Unconverted>,
    /// Options carried whose effect differs from sbatch's, in the same order. Reported, but not
    /// a reason to refuse the script as [`Conversion::unconverted`] is: the spec says what the
    /// script says.
    pub caveats: Vec<Caveat>,
}

/// Whether an option takes a value (getopt's `no_argument`, `required_argument`,
/// `optional_argument`: an optional value only in `--opt=value` form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    None,
    Required,
    Optional,
}

/// sbatch's options (Slurm 24.11 `sbatch --help` and man page), so that one the SlurmJob
/// cannot carry still takes its value and is reported by its full name.
const OPTIONS: &[(&str, Option<char>, Arg)] = &[
    ("account", Some('A'), Arg::Required),
    ("acctg-freq", None, Arg::Required),
    ("array", Some('a'), Arg::Required),
    ("batch", None, Arg::Required),
    ("bb", None, Arg::Required),
    ("bbf", None, Arg::Required),
    ("begin", Some('b'), Arg::Required),
    ("chdir", Some('D'), Arg::Required),
    ("cluster-constraint", None, Arg::Required),
    ("clusters", Some('M'), Arg::Required),
    ("comment", None, Arg::Required),
    ("constraint", Some('C'), Arg::Required),
    ("container", None, Arg::Required),
    ("container-id", None, Arg::Required),
    ("contiguous", None, Arg::None),
    ("core-spec", Some('S'), Arg::Required),
    ("cores-per-socket", None, Arg::Required),
    ("cpu-freq", None, Arg::Required),
    ("cpus-per-gpu", None, Arg::Required),
    ("cpus-per-task", Some('c'), Arg::Required),
    ("deadline", None, Arg::Required),
    ("delay-boot", None, Arg::Required),
    ("dependency", Some('d'), Arg::Required),
    ("distribution", Some('m'), Arg::Required),
    ("error", Some('e'), Arg::Required),
    ("exclude", Some('x'), Arg::Required),
    ("exclusive", None, Arg::Optional),
    ("export", None, Arg::Required),
    ("export-file", None, Arg::Required),
    ("extra", None, Arg::Required),
    ("extra-node-info", Some('B'), Arg::Required),
    ("get-user-env", None, Arg::Optional),
    ("gid", None, Arg::Required),
    ("gpu-bind", None, Arg::Required),
    ("gpu-freq", None, Arg::Required),
    ("gpus", Some('G'), Arg::Required),
    ("gpus-per-node", None, Arg::Required),
    ("gpus-per-socket", None, Arg::Required),
    ("gpus-per-task", None, Arg::Required),
    ("gres", None, Arg::Required),
    ("gres-flags", None, Arg::Required),
    ("help", Some('h'), Arg::None),
    ("hint", None, Arg::Required),
    ("hold", Some('H'), Arg::None),
    ("ignore-pbs", None, Arg::None),
    ("input", Some('i'), Arg::Required),
    ("job-name", Some('J'), Arg::Required),
    ("kill-on-invalid-dep", None, Arg::Required),
    ("licenses", Some('L'), Arg::Required),
    ("mail-type", None, Arg::Required),
    ("mail-user", None, Arg::Required),
    ("mcs-label", None, Arg::Required),
    ("mem", None, Arg::Required),
    ("mem-bind", None, Arg::Required),
    ("mem-per-cpu", None, Arg::Required),
    ("mem-per-gpu", None, Arg::Required),
    ("mincpus", None, Arg::Required),
    ("network", None, Arg::Required),
    ("nice", None, Arg::Optional),
    ("no-kill", Some('k'), Arg::Optional),
    ("no-requeue", None, Arg::None),
    ("nodefile", Some('F'), Arg::Required),
    ("nodelist", Some('w'), Arg::Required),
    ("nodes", Some('N'), Arg::Required),
    ("ntasks", Some('n'), Arg::Required),
    ("ntasks-per-core", None, Arg::Required),
    ("ntasks-per-gpu", None, Arg::Required),
    ("ntasks-per-node", None, Arg::Required),
    ("ntasks-per-socket", None, Arg::Required),
    ("oom-kill-step", None, Arg::Optional),
    ("open-mode", None, Arg::Required),
    ("output", Some('o'), Arg::Required),
    ("overcommit", Some('O'), Arg::None),
    ("oversubscribe", Some('s'), Arg::None),
    ("parsable", None, Arg::None),
    ("partition", Some('p'), Arg::Required),
    ("power", None, Arg::Required),
    ("prefer", None, Arg::Required),
    ("priority", None, Arg::Required),
    ("profile", None, Arg::Required),
    ("propagate", None, Arg::Optional),
    ("qos", Some('q'), Arg::Required),
    ("quiet", Some('Q'), Arg::None),
    ("reboot", None, Arg::None),
    ("requeue", None, Arg::None),
    ("reservation", None, Arg::Required),
    ("resv-ports", None, Arg::Optional),
    ("segment", None, Arg::Required),
    ("signal", None, Arg::Required),
    ("sockets-per-node", None, Arg::Required),
    ("spread-job", None, Arg::None),
    ("switches", None, Arg::Required),
    ("test-only", None, Arg::None),
    ("thread-spec", None, Arg::Required),
    ("threads-per-core", None, Arg::Required),
    ("time", Some('t'), Arg::Required),
    ("time-min", None, Arg::Required),
    ("tmp", None, Arg::Required),
    ("tres-bind", None, Arg::Required),
    ("tres-per-task", None, Arg::Required),
    ("uid", None, Arg::Required),
    ("usage", None, Arg::None),
    ("use-min-nodes", None, Arg::None),
    ("verbose", Some('v'), Arg::None),
    ("version", Some('V'), Arg::None),
    ("wait", Some('W'), Arg::None),
    ("wait-all-nodes", None, Arg::Required),
    ("wckey", None, Arg::Required),
    ("wrap", None, Arg::Required),
];

/// sbatch options for a job field the operator refuses in any SlurmJob, with that field's
/// name in slurmrestd's job description ([`extra_option_refusal`] gives the reason).
const REFUSED_AS: &[(&str, &str)] = &[
    ("uid", "user_id"),
    ("gid", "group_id"),
    ("priority", "priority"),
    ("reservation", "reservation"),
    ("mcs-label", "mcs_label"),
    ("container", "container"),
    ("container-id", "container_id"),
    ("clusters", "clusters"),
    ("cluster-constraint", "cluster_constraint"),
];

/// Options of the sbatch command itself rather than of the job.
const CLIENT_OPTIONS: &[&str] = &[
    "batch",
    "help",
    "ignore-pbs",
    "parsable",
    "quiet",
    "test-only",
    "usage",
    "verbose",
    "version",
    "wait",
    "wrap",
];

/// One option of an `#SBATCH` line or of the command line: its long name, value, and the text
/// as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Directive {
    origin: Origin,
    long: &'static str,
    value: Option<String>,
    written: String,
}

/// Another batch system's directives that sbatch also applies, after its own lines, unless
/// an `#SBATCH --ignore-pbs` line says not to: the first of these found in the script, the
/// others then not (sbatch translates one kind at most).
const FOREIGN_DIRECTIVES: [&str; 2] = ["#BSUB", "#PBS"];

/// How many lines not starting with `#` sbatch reads past before it stops looking for
/// [`FOREIGN_DIRECTIVES`] (unlike `#SBATCH` lines, they count after the first command too).
const FOREIGN_SCAN_LINES: usize = 100;

/// The lines of the one kind of [`FOREIGN_DIRECTIVES`] sbatch would translate, as written,
/// with their line numbers.
fn foreign_lines(script: &str) -> Vec<(usize, String)> {
    for magic in FOREIGN_DIRECTIVES {
        let mut found = Vec::new();
        let mut others = 0;
        for (index, line) in script.lines().enumerate() {
            if line.starts_with(magic) {
                found.push((index + 1, line.to_owned()));
                continue;
            }
            if !line.starts_with('#') {
                others += 1;
                if others > FOREIGN_SCAN_LINES {
                    break;
                }
            }
        }
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// The words of the `#SBATCH` lines, with their line numbers: only lines before the first
/// command count (sbatch stops at the first line that is neither blank nor a comment), and only
/// lines starting with exactly `#SBATCH` (so `##SBATCH` and `# SBATCH` are comments), or with
/// `#SLURM`, which sbatch reads the same way (warning that it is an old spelling). As in
/// sbatch, whatever follows those characters is words, blank or not: `#SBATCH--time=7` is
/// `--time=7`, and `#SBATCHX` is the word `X` (which sbatch refuses the script for).
fn directive_lines(script: &str) -> Result<Vec<(usize, Vec<String>)>, SbatchError> {
    if !script.starts_with("#!") {
        return Err(SbatchError::NoInterpreter);
    }
    // Anywhere in the script, as sbatch checks; a lone \r is only a blank to sbatch (and to
    // `words`), so it is not refused.
    if let Some(at) = script.find("\r\n") {
        let line = script[..at].matches('\n').count() + 1;
        return Err(SbatchError::DosLineBreaks { line });
    }
    let mut lines = Vec::new();
    for (index, line) in script.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim_matches(blank);
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('#') {
            break;
        }
        let Some(rest) = line
            .strip_prefix("#SBATCH")
            .or_else(|| line.strip_prefix("#SLURM"))
        else {
            continue;
        };
        lines.push((number, words(rest, number)?));
    }
    Ok(lines)
}

/// A blank as sbatch sees one (C's `isspace`): ASCII only. A no-break space is part of a word,
/// and a line of one is a command, which ends the directives.
fn blank(c: char) -> bool {
    c.is_ascii_whitespace() || c == '\u{0b}'
}

/// A line split into words as sbatch splits it (its `_get_argument`): blanks separate, quotes
/// group (and are removed), a backslash takes the next character as it is (a blank, a quote, a
/// `#`; in quotes too), and an unquoted `#` anywhere ends the line: `--job-name=run#3 -p gpu`
/// is `--job-name=run` alone to sbatch 24.11.
fn words(text: &str, line: usize) -> Result<Vec<String>, SbatchError> {
    let mut words = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| blank(*c)).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut word = String::new();
        let mut quote = None;
        // A word of quotes only (`""`) is a word; a `#` with nothing before it is not.
        let mut quoted = false;
        let mut comment = false;
        while let Some(c) = chars.next_if(|c| quote.is_some() || !blank(*c)) {
            match (c, quote) {
                ('\\', _) => word.extend(chars.next()),
                (c, Some(open)) if c == open => quote = None,
                (c, Some(_)) => word.push(c),
                ('"' | '\'', None) => {
                    quote = Some(c);
                    quoted = true;
                }
                ('#', None) => {
                    comment = true;
                    break;
                }
                (c, None) => word.push(c),
            }
        }
        if quote.is_some() {
            return Err(SbatchError::UnterminatedQuote { line });
        }
        if !word.is_empty() || quoted {
            words.push(word);
        }
        if comment {
            break;
        }
    }
    Ok(words)
}

fn long_option(name: &str) -> Result<(&'static str, Arg), &'static str> {
    // A bare `--` (or `--=x`): every name starts with "", so it is no abbreviation either.
    if name.is_empty() {
        return Err("is not an sbatch option");
    }
    if let Some((long, _, arg)) = OPTIONS.iter().find(|(long, _, _)| *long == name) {
        return Ok((long, *arg));
    }
    // getopt_long takes any unambiguous prefix (`--part=debug`).
    let mut matches = OPTIONS.iter().filter(|(long, _, _)| long.starts_with(name));
    match (matches.next(), matches.next()) {
        (Some((long, _, arg)), None) if !name.is_empty() => Ok((long, *arg)),
        (Some(_), Some(_)) => Err("is an ambiguous abbreviation of several sbatch options"),
        _ => Err("is not an sbatch option"),
    }
}

/// The options of one `#SBATCH` line or of the command line, getopt-style: `--opt=value`,
/// `--opt value`, `-Xvalue`, `-X value` and grouped flags (`-Hk`), in the order written. Options
/// sbatch does not have come back as unconverted. On an `#SBATCH` line (`until_operand` false)
/// a word that is not an option is unconverted too; on the command line it is the script, where
/// the options end as in sbatch's getopt (so does a `--` word): the second value is how many
/// words were options.
fn options(
    origin: Origin,
    words: &[String],
    until_operand: bool,
) -> (Vec<Result<Directive, Unconverted>>, usize) {
    let mut found = Vec::new();
    let all = words.len();
    let mut words = words.iter();
    let unconverted = |option: &str, reason: &str| {
        Err(Unconverted {
            origin,
            option: option.to_owned(),
            reason: reason.to_owned(),
        })
    };
    while let Some(word) = words.next() {
        if until_operand && word == "--" {
            break;
        }
        let is_operand = word == "-" || !word.starts_with('-');
        if until_operand && is_operand {
            // Not consumed: the script.
            return (found, all - words.len() - 1);
        }
        if let Some(body) = word.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (body, None),
            };
            let (long, arg) = match long_option(name) {
                Ok(found) => found,
                Err(reason) => {
                    found.push(unconverted(word, reason));
                    continue;
                }
            };
            let (value, written) = match (arg, inline) {
                (Arg::None, Some(_)) => {
                    found.push(unconverted(word, "takes no value"));
                    continue;
                }
                (Arg::Required, None) => match words.next() {
                    Some(next) => (Some(next.clone()), format!("{word} {next}")),
                    None => {
                        found.push(unconverted(word, "needs a value"));
                        continue;
                    }
                },
                (_, inline) => (inline, word.clone()),
            };
            found.push(Ok(Directive {
                origin,
                long,
                value,
                written,
            }));
        } else if let Some(flags) = word.strip_prefix('-').filter(|f| !f.is_empty()) {
            let mut rest = flags;
            while let Some(short) = rest.chars().next() {
                rest = &rest[short.len_utf8()..];
                let Some((long, _, arg)) = OPTIONS.iter().find(|(_, s, _)| *s == Some(short))
                else {
                    found.push(unconverted(&format!("-{short}"), "is not an sbatch option"));
                    continue;
                };
                // A short option's optional value is only ever attached (`-kfoo`).
                let (value, written) = match arg {
                    Arg::None => (None, format!("-{short}")),
                    _ if !rest.is_empty() => {
                        let value = std::mem::take(&mut rest);
                        (Some(value.to_owned()), format!("-{short}{value}"))
                    }
                    Arg::Optional => (None, format!("-{short}")),
                    Arg::Required => match words.next() {
                        Some(next) => (Some(next.clone()), format!("-{short} {next}")),
                        None => {
                            found.push(unconverted(&format!("-{short}"), "needs a value"));
                            continue;
                        }
                    },
                };
                found.push(Ok(Directive {
                    origin,
                    long,
                    value,
                    written,
                }));
            }
        } else {
            found.push(unconverted(
                word,
                "is not an option: sbatch takes only options on #SBATCH lines and refuses the \
                 whole script for this word (\"Invalid directive found in batch script\")",
            ));
        }
    }
    (found, all - words.len())
}

/// The words given after our `--`, split as sbatch splits its command line: options, then the
/// script, then the script's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// The sbatch options, as written (a `--` ending them included).
    pub options: Vec<String>,
    /// The first word that is not an option (or follows a `--`): the script, `-` for stdin.
    pub script: Option<String>,
    /// The words after the script: its arguments.
    pub arguments: Vec<String>,
}

impl CommandLine {
    pub fn split(words: &[String]) -> CommandLine {
        let (_, used) = options(Origin::CommandLine, words, true);
        let (options, rest) = words.split_at(used);
        CommandLine {
            options: options.to_vec(),
            script: rest.first().cloned(),
            arguments: rest.iter().skip(1).cloned().collect(),
        }
    }
}

/// Convert `script`'s `#SBATCH` lines into a spec for the SlurmCluster `cluster_name`. The
/// script itself is kept as it is.
pub fn convert(script: &str, cluster_name: &str) -> Result<Conversion, SbatchError> {
    convert_with(script, cluster_name, &[])
}

/// [`convert`] with sbatch options given on the command line ([`CommandLine::options`]), which
/// take precedence over the script's `#SBATCH` lines as in sbatch.
pub fn convert_with(
    script: &str,
    cluster_name: &str,
    command_line: &[String],
) -> Result<Conversion, SbatchError> {
    let mut spec = SlurmJobSpec {
        cluster_name: cluster_name.to_owned(),
        script: script.to_owned(),
        name: None,
        partition: None,
        account: None,
        qos: None,
        nodes: None,
        ntasks: None,
        cpus_per_task: None,
        tasks_per_node: None,
        gpus_per_node: None,
        gpus_per_task: None,
        exclusive: None,
        memory_per_node: None,
        memory_per_cpu: None,
        time_limit: None,
        nice: None,
        suspend: None,
        environment: BTreeMap::new(),
        working_directory: None,
        constraints: None,
        gres: None,
        tres_per_task: None,
        tres: None,
        array: None,
        depends_on: Vec::new(),
        standard_output: None,
        standard_error: None,
        output: None,
        extra_options: None,
    };
    let mut unconverted = Vec::new();
    let mut extra = serde_json::Map::new();
    // Which option set each field last, in the order applied, to report the later of two that
    // conflict.
    let mut set_at: BTreeMap<&'static str, (usize, Directive)> = BTreeMap::new();
    let mut order = 0;
    // The command line's after the script's, so that a later one wins as in sbatch (which reads
    // its command line again after the script).
    let mut lines: Vec<(Origin, Vec<String>)> = directive_lines(script)?
        .into_iter()
        .map(|(line, words)| (Origin::Line(line), words))
        .collect();
    lines.push((Origin::CommandLine, command_line.to_vec()));
    // Whether an `#SBATCH --ignore-pbs` line was given: sbatch then reads no
    // FOREIGN_DIRECTIVES. Not the command line's: sbatch reads that one only after it has
    // translated them.
    let mut ignore_foreign = false;
    for (origin, words) in lines {
        let on_command_line = origin == Origin::CommandLine;
        let (found, used) = options(origin, &words, on_command_line);
        // The command line's options end at the script (`CommandLine::split`): anything after
        // that given here is not an option, and is reported rather than dropped.
        for word in &words[used..] {
            unconverted.push(Unconverted {
                origin,
                option: word.clone(),
                reason: "is not an sbatch option (the script and its arguments come after the \
                         options)"
                    .into(),
            });
        }
        for d in found {
            let d = match d {
                Ok(d) => d,
                Err(bad) => {
                    unconverted.push(bad);
                    continue;
                }
            };
            if d.long == "ignore-pbs" {
                // Honoured here, as sbatch honours it, by not reporting the lines it would not
                // read either; nothing of the job's.
                ignore_foreign |= !on_command_line;
                continue;
            }
            match apply(&mut spec, &mut extra, &d) {
                Ok(()) => {
                    order += 1;
                    set_at.insert(d.long, (order, d));
                }
                Err(reason) => unconverted.push(Unconverted {
                    origin: d.origin,
                    option: d.written.clone(),
                    reason,
                }),
            }
        }
    }
    // sbatch applies them after its own lines; a SlurmJob has nothing to apply them with.
    if !ignore_foreign {
        for (line, written) in foreign_lines(script) {
            unconverted.push(Unconverted {
                origin: Origin::Line(line),
                option: written,
                reason: "is another batch system's directive, which sbatch applies too (after \
                         the #SBATCH lines, wherever it is in the script) and a SlurmJob does \
                         not: write it as #SBATCH options, or add an #SBATCH --ignore-pbs line \
                         if sbatch was meant to skip it"
                    .into(),
            });
        }
    }
    // Pairs sbatch refuses, or that the SlurmJob refuses as saying one thing twice: the later
    // option is reported, the earlier kept; but the command line's is kept against the
    // script's, as it takes precedence (sbatch refuses such a pair too: still reported).
    let mut drop_later = |first: &str, second: &str, reason: &str| -> Option<&'static str> {
        let (a, b) = (set_at.get(first)?, set_at.get(second)?);
        let ((_, earlier), (_, later)) = if a.0 > b.0 { (b, a) } else { (a, b) };
        let (dropped, reason) = match (earlier.origin, later.origin) {
            (Origin::Line(_), Origin::CommandLine) => (
                earlier,
                format!(
                    "{reason}; the command line's {} is kept, as it takes precedence",
                    later.written
                ),
            ),
            _ => (later, reason.to_owned()),
        };
        unconverted.push(Unconverted {
            origin: dropped.origin,
            option: dropped.written.clone(),
            reason,
        });
        Some(dropped.long)
    };
    if let Some(dropped) = drop_later(
        "mem",
        "mem-per-cpu",
        "sbatch refuses --mem together with --mem-per-cpu",
    ) {
        match dropped {
            "mem" => spec.memory_per_node = None,
            _ => spec.memory_per_cpu = None,
        }
    }
    if let Some(dropped) = drop_later(
        "exclusive",
        "oversubscribe",
        "sbatch refuses --exclusive together with --oversubscribe",
    ) {
        match dropped {
            "exclusive" => spec.exclusive = None,
            _ => {
                extra.remove("shared");
            }
        }
    }
    let gpu_in = |text: &Option<String>| text.as_deref().is_some_and(|t| t.contains("gpu"));
    if gpu_in(&spec.gres)
        && let Some(dropped) = drop_later(
            "gres",
            "gpus-per-node",
            "--gres with GPUs and --gpus-per-node both ask for GPUs per node",
        )
    {
        match dropped {
            "gres" => spec.gres = None,
            _ => spec.gpus_per_node = None,
        }
    }
    if gpu_in(&spec.tres_per_task)
        && let Some(dropped) = drop_later(
            "tres-per-task",
            "gpus-per-task",
            "--tres-per-task with GPUs and --gpus-per-task both ask for GPUs per task",
        )
    {
        match dropped {
            "tres-per-task" => spec.tres_per_task = None,
            _ => spec.gpus_per_task = None,
        }
    }
    // sbatch runs the job in the directory it was run from; a SlurmJob without an absolute
    // --chdir runs in the operator's default on the Slurm nodes, so a relative file lands there
    // (and the job fails if its directory is not there).
    let mut caveats = Vec::new();
    if spec.working_directory.is_none() {
        for (long, file) in [
            ("output", &spec.standard_output),
            ("error", &spec.standard_error),
        ] {
            let (Some(file), Some((_, d))) = (file, set_at.get(long)) else {
                continue;
            };
            if !file.starts_with('/') {
                caveats.push(Caveat {
                    origin: d.origin,
                    option: d.written.clone(),
                    reason: format!(
                        "is relative to the job's working directory, which without an absolute \
                         --chdir is {DEFAULT_WORKING_DIRECTORY} on the Slurm nodes (not the \
                         directory sbatch would run in): give an absolute --chdir or path"
                    ),
                });
            }
        }
    }
    // sbatch's --export=NONE or NAME=value list also has the node load the user's login
    // environment for the job (as --get-user-env); a SlurmJob's script gets spec.environment.
    if let Some((_, d)) = set_at.get("export") {
        caveats.push(Caveat {
            origin: d.origin,
            option: d.written.clone(),
            reason: "under sbatch, the job also gets the user's login environment on the node \
                     (as with --get-user-env: PATH, modules, ~/.profile); a SlurmJob's script \
                     gets only these variables: add what it needs (PATH among them), or set \
                     it up in the script"
                .into(),
        });
    }
    caveats.sort_by_key(|c| c.origin);
    if !extra.is_empty() {
        spec.extra_options = Some(extra);
    }
    unconverted.sort_by_key(|u| u.origin);
    Ok(Conversion {
        spec,
        unconverted,
        caveats,
    })
}

/// Set the field `d` maps to, or say why it has none.
fn apply(
    spec: &mut SlurmJobSpec,
    extra: &mut serde_json::Map<String, Value>,
    d: &Directive,
) -> Result<(), String> {
    let value = d.value.clone().unwrap_or_default();
    let text = |max: usize| -> Result<String, String> {
        if value.is_empty() {
            Err("needs a value".into())
        } else if value.len() > max {
            Err(format!(
                "is longer than the SlurmJob takes ({max} characters)"
            ))
        } else {
            Ok(value.clone())
        }
    };
    match d.long {
        "job-name" => spec.name = Some(text(200)?),
        "partition" => spec.partition = Some(text(1024)?),
        "account" => spec.account = Some(text(256)?),
        "qos" => spec.qos = Some(text(256)?),
        "constraint" => spec.constraints = Some(text(1024)?),
        "gres" => spec.gres = Some(text(1024)?),
        "tres-per-task" => spec.tres_per_task = Some(text(1024)?),
        "time" => spec.time_limit = Some(time_limit(&value)?),
        "nodes" => spec.nodes = Some(nodes(&value)?),
        "ntasks" => spec.ntasks = Some(count(&value)?),
        "ntasks-per-node" => spec.tasks_per_node = Some(count(&value)?),
        "cpus-per-task" => spec.cpus_per_task = Some(count(&value)?),
        "mem" => spec.memory_per_node = Some(memory(&value)?),
        "mem-per-cpu" => spec.memory_per_cpu = Some(memory(&value)?),
        "gpus-per-node" => spec.gpus_per_node = Some(gpus(&value)?),
        "gpus-per-task" => spec.gpus_per_task = Some(gpus(&value)?),
        "gpus" => {
            extra.insert(
                "tres_per_job".into(),
                json!(format!("gres/gpu:{}", gpus(&value)?)),
            );
        }
        "exclusive" => {
            spec.exclusive = Some(match d.value.as_deref() {
                None | Some("") => Exclusive::Node,
                Some("user") => Exclusive::User,
                Some("mcs") => Exclusive::Mcs,
                Some(_) => {
                    return Err("has no SlurmJob form (exclusive is node, user or mcs)".into());
                }
            });
        }
        // sbatch refuses it with --exclusive: `convert_with` reports one of the two.
        "oversubscribe" => {
            extra.insert("shared".into(), json!(["oversubscribe"]));
        }
        "array" => spec.array = Some(array(&value)?),
        "output" => spec.standard_output = Some(stdio_file(text(4096)?)),
        "error" => spec.standard_error = Some(stdio_file(text(4096)?)),
        "chdir" => {
            if !value.starts_with('/') {
                return Err(
                    "is relative to the submitting shell's directory: the SlurmJob needs an absolute workingDirectory"
                        .into(),
                );
            }
            spec.working_directory = Some(text(4096)?);
        }
        "export" => export(&value, &mut spec.environment)?,
        "hold" => spec.suspend = Some(true),
        // sbatch's --nice without a value is 100.
        "nice" => {
            let nice: i32 = match d.value.as_deref() {
                None | Some("") => 100,
                Some(n) => n
                    .trim()
                    .parse()
                    .map_err(|_| "needs a whole number".to_owned())?,
            };
            if !(0..=2_147_483_645).contains(&nice) {
                return Err(
                    "has no SlurmJob form below 0: a negative nice needs Slurm administrator rights"
                        .into(),
                );
            }
            spec.nice = Some(nice);
        }
        "requeue" => {
            extra.insert("requeue".into(), json!(true));
        }
        "no-requeue" => {
            extra.insert("requeue".into(), json!(false));
        }
        "mail-user" => {
            extra.insert("mail_user".into(), json!(text(1024)?));
        }
        "mail-type" => {
            // As sbatch adds each option's types to the earlier ones' (NONE in one value
            // silences that value's others, and adds nothing).
            if let Some(types) = mail_types(&value)? {
                let mut all: Vec<Value> = extra
                    .get("mail_type")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for flag in types {
                    let flag = json!(flag);
                    if !all.contains(&flag) {
                        all.push(flag);
                    }
                }
                extra.insert("mail_type".into(), Value::Array(all));
            }
        }
        "licenses" => {
            extra.insert("licenses".into(), json!(text(1024)?));
        }
        "dependency" => {
            return Err(
                "names Slurm jobs by id (or is singleton): a SlurmJob waits for other SlurmJobs \
                 through dependsOn (--depends-on NAME[:afterok|afterany|afternotok])"
                    .into(),
            );
        }
        "comment" => {
            return Err("the operator keeps the job's ownership tag in its comment".into());
        }
        long if CLIENT_OPTIONS.contains(&long) => {
            return Err("is an option of the sbatch command, not of the job".into());
        }
        // Said as admission says it for `extraOptions`: a converted script must not look as
        // if only the converter lacked a field for whom the job runs as.
        long => {
            let refusal = REFUSED_AS
                .iter()
                .find(|(option, _)| *option == long)
                .and_then(|(_, key)| extra_option_refusal(key));
            return Err(refusal.unwrap_or("has no SlurmJob field").into());
        }
    }
    Ok(())
}

/// sbatch's `--mail-type` names as slurmrestd's `mail_type` flags, which name several of them
/// differently (slurmrestd takes an unknown one with a warning and sends no mail for it).
/// `None` for NONE, which silences every other type in sbatch.
fn mail_types(value: &str) -> Result<Option<Vec<&'static str>>, String> {
    let mut types = Vec::new();
    for name in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let flags: &[&'static str] = match name.to_ascii_uppercase().as_str() {
            "NONE" => return Ok(None),
            "BEGIN" => &["BEGIN"],
            "END" => &["END"],
            "FAIL" => &["FAIL"],
            "REQUEUE" => &["REQUEUE"],
            "STAGE_OUT" => &["STAGE_OUT"],
            "ARRAY_TASKS" => &["ARRAY_TASKS"],
            "INVALID_DEPEND" => &["INVALID_DEPENDENCY"],
            "TIME_LIMIT" => &["TIME=100%"],
            "TIME_LIMIT_90" => &["TIME=90%"],
            "TIME_LIMIT_80" => &["TIME=80%"],
            "TIME_LIMIT_50" => &["TIME=50%"],
            "ALL" => &[
                "BEGIN",
                "END",
                "FAIL",
                "REQUEUE",
                "STAGE_OUT",
                "INVALID_DEPENDENCY",
            ],
            _ => {
                return Err(format!(
                    "names {name:?}, which sbatch does not know (NONE, BEGIN, END, FAIL, \
                     REQUEUE, ALL, INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90, \
                     TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS)"
                ));
            }
        };
        for flag in flags {
            if !types.contains(flag) {
                types.push(*flag);
            }
        }
    }
    if types.is_empty() {
        return Err("needs a value".into());
    }
    Ok(Some(types))
}

/// An `--output`/`--error` file as Slurm opens it: `none` (any case) is sbatch's name for
/// `/dev/null`, not a file called `none` in the working directory.
fn stdio_file(value: String) -> String {
    if value.eq_ignore_ascii_case("none") {
        "/dev/null".to_owned()
    } else {
        value
    }
}

fn count(value: &str) -> Result<i32, String> {
    match value.parse::<i32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1".into()),
    }
}

/// `N` or `MIN-MAX`, each at most 9 digits, as `spec.nodes` takes them.
fn nodes(value: &str) -> Result<String, String> {
    let bound = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
            .filter(|n| *n >= 1)
    };
    let ok = match value.split_once('-') {
        None => bound(value).is_some(),
        Some((min, max)) => matches!((bound(min), bound(max)), (Some(a), Some(b)) if a <= b),
    };
    if ok {
        Ok(value.to_owned())
    } else {
        Err("has no SlurmJob form (nodes is a count such as 2 or a range such as 1-4)".into())
    }
}

/// sbatch's time formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, as whole minutes
/// rounded up (as Slurm does), written as a Kubernetes duration such as `1h30m`.
fn time_limit(value: &str) -> Result<crate::crd::duration::Duration, String> {
    let lower = value.to_ascii_lowercase();
    if matches!(lower.as_str(), "infinite" | "unlimited" | "-1" | "0") {
        return Err(
            "asks for no time limit, which the SlurmJob cannot say: leave timeLimit unset for the \
             partition's limit"
                .into(),
        );
    }
    let invalid = || format!("is not an sbatch time ({value:?})");
    let number = |s: &str| -> Result<u64, String> {
        if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        s.parse().map_err(|_| invalid())
    };
    let (days, clock) = match value.split_once('-') {
        Some((days, clock)) => (Some(number(days)?), clock),
        None => (None, value),
    };
    let parts: Vec<u64> = clock.split(':').map(number).collect::<Result<_, _>>()?;
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86_400 + h * 3600,
        (Some(d), [h, m]) => d * 86_400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86_400 + h * 3600 + m * 60 + s,
        _ => return Err(invalid()),
    };
    let minutes = seconds.div_ceil(60);
    if minutes == 0 {
        return Err("asks for no time limit, which the SlurmJob cannot say".into());
    }
    let text = match (minutes / 60, minutes % 60) {
        (0, m) => format!("{m}m"),
        (h, 0) => format!("{h}h"),
        (h, m) => format!("{h}h{m}m"),
    };
    text.parse().map_err(|e| format!("{e}"))
}

/// sbatch's memory sizes: a number with an optional K, M (the default), G or T suffix.
fn memory(value: &str) -> Result<Quantity, String> {
    let upper = value.to_ascii_uppercase();
    let (digits, unit) = match upper.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => upper.split_at(at),
        None => (upper.as_str(), ""),
    };
    let unit = match unit {
        "" | "M" | "MB" => "Mi",
        "K" | "KB" => "Ki",
        "G" | "GB" => "Gi",
        "T" | "TB" => "Ti",
        _ => return Err(format!("is not an sbatch memory size ({value:?})")),
    };
    match digits.parse::<u64>() {
        Ok(0) => Err("0 (all of a node's memory) has no SlurmJob form: give a size".into()),
        Ok(n) => Ok(Quantity(format!("{n}{unit}"))),
        Err(_) => Err(format!("is not an sbatch memory size ({value:?})")),
    }
}

/// `[type:]count`, as `gpusPerNode`/`gpusPerTask` take it.
fn gpus(value: &str) -> Result<String, String> {
    let (kind, count) = match value.rsplit_once(':') {
        Some((kind, count)) => (Some(kind), count),
        None => (None, value),
    };
    let kind_ok = kind.is_none_or(|k| {
        !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    });
    let count_ok = !count.is_empty()
        && count.len() <= 6
        && !count.starts_with('0')
        && count.bytes().all(|b| b.is_ascii_digit());
    if kind_ok && count_ok {
        Ok(value.to_owned())
    } else {
        Err(
            "has no SlurmJob form (a GPU count such as 2, or a type and a count such as a100:2)"
                .into(),
        )
    }
}

/// `--array`'s index list with an optional `%N` throttle, as `spec.array` takes it.
fn array(value: &str) -> Result<String, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (list, throttle) = match value.split_once('%') {
        Some((list, throttle)) => (list, Some(throttle)),
        None => (value, None),
    };
    let entry = |e: &str| match e.split_once('-') {
        None => digits(e),
        Some((start, rest)) => {
            digits(start)
                && match rest.split_once(':') {
                    None => digits(rest),
                    Some((end, step)) => digits(end) && digits(step),
                }
        }
    };
    if list.split(',').all(entry) && throttle.is_none_or(digits) {
        Ok(value.to_owned())
    } else {
        Err("has no SlurmJob form (indices such as 0-9, 1,3,5 or 0-15:4, optionally %N)".into())
    }
}

/// `--export`: `NAME=value` entries become the job's environment, in place of an earlier
/// `--export`'s (sbatch keeps the last one only: a command line's `--export=NONE` drops the
/// script's). The submitting shell's environment (`ALL`, or a bare `NAME`) does not reach a
/// SlurmJob.
fn export(value: &str, environment: &mut BTreeMap<String, String>) -> Result<(), String> {
    let mut copied = Vec::new();
    let mut set = Vec::new();
    for entry in value.split(',').filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            Some((name, val)) if !name.is_empty() => set.push((name.to_owned(), val.to_owned())),
            // sbatch reads NONE and ALL in any case.
            _ if entry.eq_ignore_ascii_case("NONE") => {}
            _ => copied.push(entry),
        }
    }
    if copied.is_empty() {
        // Nothing is set from an option reported as not converted.
        *environment = set.into_iter().collect();
        Ok(())
    } else {
        Err(format!(
            "copies the submitting shell's environment ({}), which a SlurmJob has not: set \
             NAME=value entries (spec.environment)",
            copied.join(",")
        ))
    }
}

/// A Kubernetes object name from `text` (a job name or a file name): lowercase letters, digits
/// and `-`, at most 63 characters; `None` when nothing usable is left.
pub fn object_name(text: &str) -> Option<String> {
    let mut name = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name: String = name.trim_matches('-').chars().take(63).collect();
    let name = name.trim_end_matches('-').to_owned();
    (!name.is_empty()).then_some(name)
}

/// `NAME` or `NAME:TYPE` of `--depends-on`.
pub fn dependency(text: &str) -> Result<JobDependency, String> {
    let (name, kind) = match text.split_once(':') {
        Some((name, kind)) => (name, Some(kind)),
        None => (text, None),
    };
    let type_ = match kind {
        None | Some("afterok") => DependencyType::AfterOk,
        Some("afterany") => DependencyType::AfterAny,
        Some("afternotok") => DependencyType::AfterNotOk,
        Some(other) => {
            return Err(format!(
                "--depends-on {text}: {other} is not afterok, afterany or afternotok"
            ));
        }
    };
    if !crate::crd::is_object_name(name) {
        return Err(format!(
            "--depends-on {text}: {name:?} is not the name of a SlurmJob"
        ));
    }
    Ok(JobDependency {
        name: name.to_owned(),
        type_,
    })
}

#[derive(Debug, Args)]
pub struct SbatchArgs {
    /// The batch script (`-` reads it from stdin); or give it after the sbatch options, past
    /// `--`.
    pub script: Option<PathBuf>,
    /// Namespace of the SlurmJob (default: the kubeconfig's namespace with --apply; none in
    /// the printed YAML).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub kube: super::KubeArgs,
    /// The SlurmCluster to run on.
    #[arg(long, env = "SLURM_OPERATOR_CLUSTER")]
    pub cluster: Option<String>,
    /// Name of the SlurmJob (default: from the job name, else from the file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Wait for another SlurmJob: NAME or NAME:afterok|afterany|afternotok (repeatable).
    #[arg(long = "depends-on", value_name = "NAME[:TYPE]")]
    pub depends_on: Vec<String>,
    /// Create the SlurmJob in Kubernetes instead of printing it.
    #[arg(long)]
    pub apply: bool,
    /// Go on when some sbatch options cannot be carried (they are still listed on stderr).
    #[arg(long)]
    pub allow_unknown: bool,
    /// After `--`: sbatch's own options, as typed for sbatch (`-- -p gpu -t 10 job.sh`), then
    /// the script. They take precedence over the script's #SBATCH lines. (`--` because our
    /// `-n` is the namespace, sbatch's the number of tasks.)
    #[arg(last = true, value_name = "SBATCH_ARGS")]
    pub sbatch: Vec<String>,
}

/// Exit code when options were not converted (2 is a usage error).
const EXIT_UNCONVERTED: u8 = 3;

impl SbatchArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        let command_line = CommandLine::split(&self.sbatch);
        let path = self.script_path(&command_line)?;
        let script = read_script(&path)?;
        let cluster = self.cluster.clone().ok_or_else(|| {
            CliError::Usage("--cluster NAME is required: the SlurmCluster to run on".into())
        })?;
        let conversion = convert_with(&script, &cluster, &command_line.options)
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
        // A script line is named with its file; the command line is the command line.
        let warn = |origin: Origin, what: &dyn std::fmt::Display| match origin {
            Origin::Line(_) => eprintln!("warning: {}: {what}", path.display()),
            Origin::CommandLine => eprintln!("warning: {what}"),
        };
        for u in &conversion.unconverted {
            warn(u.origin, u);
        }
        for c in &conversion.caveats {
            warn(c.origin, c);
        }
        if !conversion.unconverted.is_empty() && !self.allow_unknown {
            let total = conversion.unconverted.len();
            let on_command_line = conversion
                .unconverted
                .iter()
                .filter(|u| u.origin == Origin::CommandLine)
                .count();
            if on_command_line == 0 {
                eprintln!(
                    "error: {total} #SBATCH option(s) not converted; slurmrestd ignores #SBATCH \
                     lines, so the job would run without them (--allow-unknown to go on anyway)"
                );
            } else {
                eprintln!(
                    "error: {total} sbatch option(s) not converted ({on_command_line} on the \
                     command line); the job would run without them (--allow-unknown to go on \
                     anyway)"
                );
            }
            return Ok(EXIT_UNCONVERTED);
        }
        let job = self.slurm_job(conversion.spec, &path)?;
        if self.apply {
            create(job, &self.kube, self.namespace.as_deref()).await?;
        } else {
            let yaml = serde_yaml_ng::to_string(&job)
                .map_err(|e| CliError::Usage(format!("cannot print the SlurmJob: {e}")))?;
            super::print_out(&yaml)?;
        }
        Ok(0)
    }

    /// The script: before `--` or after the sbatch options, not both; without arguments, which
    /// a SlurmJob cannot pass.
    fn script_path(&self, command_line: &CommandLine) -> Result<PathBuf, CliError> {
        let after: Vec<&str> = command_line
            .script
            .iter()
            .chain(&command_line.arguments)
            .map(String::as_str)
            .collect();
        // An option sbatch does not have (or one missing its value) is where sbatch refuses the
        // command line: said first, since the word after it may look like the script.
        let (found, _) = options(Origin::CommandLine, &command_line.options, true);
        if let Some(bad) = found.iter().find_map(|f| f.as_ref().err()) {
            return Err(CliError::Usage(format!(
                "command line: {}: {}, and sbatch refuses the command line for it",
                bad.option, bad.reason
            )));
        }
        let wrap = found
            .iter()
            .any(|f| f.as_ref().is_ok_and(|d| d.long == "wrap"));
        match (&self.script, &command_line.script) {
            (None, None) if wrap => Err(CliError::Usage(
                "--wrap has no SlurmJob form: a SlurmJob runs a script; put the command in one \
                 (#!/bin/sh, then the command) and give it after the options"
                    .into(),
            )),
            (Some(before), Some(_)) => Err(CliError::Usage(format!(
                "the script is given before -- ({}) and more words follow the sbatch options \
                 ({}): a second script, or arguments for it, which a SlurmJob cannot pass. Give \
                 the script once: slurm-operator sbatch [FLAGS] -- [SBATCH OPTIONS...] SCRIPT",
                before.display(),
                after.join(" ")
            ))),
            (None, Some(script)) if !command_line.arguments.is_empty() => {
                Err(CliError::Usage(format!(
                    "{script} is followed by arguments ({}): a SlurmJob has no field for a \
                     script's arguments (sbatch passes them as $1, $2, ...). Set them in the \
                     script, or give values as sbatch options before it (--export=NAME=value)",
                    command_line.arguments.join(" ")
                )))
            }
            (Some(before), None) => Ok(before.clone()),
            (None, Some(script)) => Ok(PathBuf::from(script)),
            (None, None) => Err(CliError::Usage(
                "no script: slurm-operator sbatch [FLAGS] SCRIPT, or [FLAGS] -- [SBATCH \
                 OPTIONS...] SCRIPT (- reads it from stdin)"
                    .into(),
            )),
        }
    }

    fn slurm_job(&self, mut spec: SlurmJobSpec, path: &Path) -> Result<SlurmJob, CliError> {
        for text in &self.depends_on {
            spec.depends_on
                .push(dependency(text).map_err(CliError::Usage)?);
        }
        let name = match &self.name {
            Some(name) if crate::crd::is_object_name(name) => name.clone(),
            Some(name) => {
                return Err(CliError::Usage(format!(
                    "--name {name:?} is not a Kubernetes object name"
                )));
            }
            None => spec
                .name
                .as_deref()
                .and_then(object_name)
                .or_else(|| file_stem(path).and_then(|s| object_name(&s)))
                .ok_or_else(|| CliError::Usage("no name for the SlurmJob: give --name".into()))?,
        };
        let mut job = SlurmJob::new(&name, spec);
        job.metadata.namespace = self.namespace.clone();
        Ok(job)
    }
}

fn file_stem(path: &Path) -> Option<String> {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| s != "-")
}

/// `spec.script`'s `maxLength` in the CRD, in characters (a test holds them the same).
const SCRIPT_MAX_CHARS: usize = 1_048_576;

/// The script, read up to what `spec.script` can hold (`/dev/zero`, or a file of gigabytes, is
/// not read whole); a longer one is refused here, naming the field, rather than by the API
/// server after the conversion said it was fine.
fn read_script(path: &Path) -> Result<String, CliError> {
    use std::io::Read;
    let failed = |source| CliError::ReadFile {
        what: "script",
        path: path.to_owned(),
        source,
    };
    // A character is at most 4 bytes: one byte past that is more characters than allowed.
    let limit = (SCRIPT_MAX_CHARS * 4 + 1) as u64;
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|file| file.take(limit).read_to_end(&mut bytes))
    }
    .map_err(failed)?;
    let too_long = || {
        CliError::Usage(format!(
            "{}: the script is longer than spec.script allows ({SCRIPT_MAX_CHARS} characters); \
             keep large files on a shared filesystem and read them from the script",
            path.display()
        ))
    };
    if bytes.len() as u64 >= limit {
        return Err(too_long());
    }
    let script = String::from_utf8(bytes)
        .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    if script.chars().count() > SCRIPT_MAX_CHARS {
        return Err(too_long());
    }
    Ok(script)
}

async fn create(
    mut job: SlurmJob,
    kube: &super::KubeArgs,
    namespace: Option<&str>,
) -> Result<(), CliError> {
    let (client, namespace) = kube.client(namespace).await?;
    job.metadata.namespace = Some(namespace.clone());
    let api: kube::Api<SlurmJob> = kube::Api::namespaced(client, &namespace);
    let name = create_once(&api, job, &namespace).await?;
    super::print_out(&format!(
        "slurmjob.slurm.rs/{name} created in namespace {namespace}\n"
    ))
}

/// The annotation `sbatch --apply` marks the SlurmJob it creates with: a value of that one call
/// (a random UUID), so that a create whose outcome it cannot tell is told apart from someone
/// else's SlurmJob of the name.
pub const SUBMISSION_ANNOTATION: &str = "slurm.rs/submission";

/// Creates `job` through `api` (of `namespace`) and returns its name. A create the API server
/// may have made although the answer says otherwise (kube's client retries a POST answered 503
/// or 504, whose retry then finds the first one's object: 409; or the answer is lost) is read
/// back: the object carrying this call's [`SUBMISSION_ANNOTATION`] is this call's, created,
/// and not someone else's of the same name to delete or rename around.
async fn create_once(
    api: &kube::Api<SlurmJob>,
    mut job: SlurmJob,
    namespace: &str,
) -> Result<String, CliError> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let submission = uuid::Uuid::new_v4().to_string();
    job.metadata
        .annotations
        .get_or_insert_default()
        .insert(SUBMISSION_ANNOTATION.to_owned(), submission.clone());
    let error = match api.create(&kube::api::PostParams::default(), &job).await {
        Ok(created) => return Ok(created.metadata.name.unwrap_or(name)),
        Err(error) => error,
    };
    // Only a refusal says for sure that nothing was made (a 409 says something was).
    let maybe_made = match &error {
        kube::Error::Api(status) => status.is_already_exists() || status.code >= 500,
        _ => true,
    };
    if maybe_made
        && let Ok(Some(there)) = api.get_opt(&name).await
        && there
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SUBMISSION_ANNOTATION))
            == Some(&submission)
    {
        return Ok(name);
    }
    Err(match error {
        // Submitting the same script twice is the common case: say what to do about it.
        kube::Error::Api(status) if status.is_already_exists() => {
            CliError::Usage(already_exists(&name, namespace))
        }
        // Out of reach or failing for now: the same command may work later, and the create
        // may have been made (the read-back failed too).
        e if crate::controller::kit::may_pass(&e) => CliError::Unavailable(format!(
            "cannot create the SlurmJob: {e}; it may have been created: `kubectl get \
             slurmjob {name} -n {namespace}` tells"
        )),
        e => CliError::Usage(format!("cannot create the SlurmJob: {e}")),
    })
}

/// What to do when a SlurmJob of that name is there already (`create` never overwrites one).
fn already_exists(name: &str, namespace: &str) -> String {
    format!(
        "cannot create the SlurmJob: slurmjob {namespace}/{name} already exists. Give this one \
         another name (--name), delete that one first (kubectl delete slurmjob {name} -n \
         {namespace}), or edit its spec to run it again (kubectl edit slurmjob {name} -n \
         {namespace}: a changed spec runs again once its current job has ended)"
    )
}

#[cfg(test)]
mod tests;
