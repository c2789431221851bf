use super::*;

fn script(lines: &[&str]) -> String {
    let mut s = String::from("#!/bin/bash\n");
    for line in lines {
        s.push_str(line);
        s.push('\n');
    }
    s
}

fn converted(lines: &[&str]) -> Conversion {
    convert(&script(lines), "main").unwrap()
}

/// The script's unconverted options by line (none may be from the command line).
fn reported(c: &Conversion) -> Vec<(usize, &str)> {
    c.unconverted
        .iter()
        .map(|u| (u.origin.line().expect("a script line"), u.option.as_str()))
        .collect()
}

/// Each option not converted, with where it was written.
fn located(c: &Conversion) -> Vec<(Origin, &str)> {
    c.unconverted
        .iter()
        .map(|u| (u.origin, u.option.as_str()))
        .collect()
}

#[test]
fn only_sbatch_lines_before_the_first_command_count() {
    let c = converted(&[
        "",
        "# a comment",
        "#SBATCH --job-name=first",
        "##SBATCH --partition=disabled",
        "# SBATCH --partition=also-a-comment",
        "   ",
        "#SBATCH -p debug # trailing comment",
        "echo start",
        "#SBATCH --account=too-late",
    ]);
    assert_eq!(c.spec.name.as_deref(), Some("first"));
    assert_eq!(c.spec.partition.as_deref(), Some("debug"));
    assert_eq!(c.spec.account, None);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.cluster_name, "main");
    assert!(c.spec.script.contains("#SBATCH --account=too-late"));
}

/// sbatch 24.11 takes whatever follows the 8 characters `#SBATCH` as words, blank or not:
/// `#SBATCH--time=7` gave the job a 7:00 limit, and a tab after `#SBATCH` works as a blank.
#[test]
fn whatever_follows_sbatch_is_words_even_without_a_blank() {
    for (line, want) in [
        ("#SBATCH--time=7", "7m"),
        ("#SBATCH-t 7", "7m"),
        ("#SBATCH\t--time=7", "7m"),
        ("#SBATCH --time=7", "7m"),
    ] {
        let c = converted(&[line]);
        assert!(c.unconverted.is_empty(), "{line:?}: {:?}", c.unconverted);
        let limit = c.spec.time_limit.map(|l| serde_json::to_value(&l).unwrap());
        assert_eq!(limit, Some(json!(want)), "{line:?}");
    }
    // A bare #SBATCH has no words: nothing to report.
    let c = converted(&["#SBATCH", "#SBATCH -J bare"]);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.name.as_deref(), Some("bare"));
}

/// sbatch refuses the script for the word glued to `#SBATCH`: reported (exit 3), saying so, the
/// rest of the line still read.
#[test]
fn a_word_glued_to_sbatch_is_an_invalid_directive() {
    // sbatch 24.11: "Invalid directive found in batch script: X".
    let c = converted(&["#SBATCHX --job-name=weird"]);
    assert_eq!(reported(&c), [(2, "X")]);
    assert_eq!(c.spec.name.as_deref(), Some("weird"));
    let message = c.unconverted[0].to_string();
    assert!(
        message.starts_with("line 2: X: is not an option"),
        "{message}"
    );
    assert!(message.contains("Invalid directive"), "{message}");
}

#[test]
fn long_and_short_forms_with_attached_and_separate_values() {
    for lines in [
        &["#SBATCH --nodes=2 --ntasks=8 --cpus-per-task=4"][..],
        &[
            "#SBATCH --nodes 2",
            "#SBATCH --ntasks 8",
            "#SBATCH --cpus-per-task 4",
        ],
        &["#SBATCH -N2 -n8 -c4"],
        &["#SBATCH -N 2 -n 8 -c 4"],
        // getopt_long's unambiguous abbreviations.
        &["#SBATCH --nodes=2 --ntasks=8 --cpus-per-t=4"],
    ] {
        let c = converted(lines);
        assert!(c.unconverted.is_empty(), "{lines:?}: {:?}", c.unconverted);
        assert_eq!(c.spec.nodes.as_deref(), Some("2"), "{lines:?}");
        assert_eq!(c.spec.ntasks, Some(8), "{lines:?}");
        assert_eq!(c.spec.cpus_per_task, Some(4), "{lines:?}");
    }
    let c = converted(&["#SBATCH --part=debug --nod=2"]);
    assert_eq!(c.spec.partition.as_deref(), Some("debug"));
    assert_eq!(
        reported(&c),
        [(2, "--nod=2")],
        "nodes, nodefile or nodelist"
    );
    // Grouped short flags, then one with a value.
    let c = converted(&["#SBATCH -Hp debug"]);
    assert_eq!(c.spec.partition.as_deref(), Some("debug"));
    assert_eq!(c.spec.suspend, Some(true), "--hold is spec.suspend");
    assert_eq!(c.spec.extra_options, None);
    // --nice with and without its value; a negative one is an administrator's and reported.
    for (line, want) in [
        ("#SBATCH --nice=50", Some(50)),
        ("#SBATCH --nice", Some(100)),
    ] {
        let c = converted(&[line]);
        assert_eq!(c.spec.nice, want, "{line}");
        assert!(c.unconverted.is_empty(), "{line}: {:?}", c.unconverted);
    }
    let c = converted(&["#SBATCH --nice=-5"]);
    assert_eq!(c.spec.nice, None);
    assert_eq!(reported(&c), [(2, "--nice=-5")]);
    // Quotes group words and are removed.
    let c = converted(&[r#"#SBATCH --job-name="two words" --constraint='a&b'"#]);
    assert_eq!(c.spec.name.as_deref(), Some("two words"));
    assert_eq!(c.spec.constraints.as_deref(), Some("a&b"));
}

#[test]
fn every_sbatch_time_format() {
    for (written, want) in [
        ("30", "30m"),
        ("90", "1h30m"),
        ("120", "2h"),
        ("10:30", "11m"), // MM:SS, seconds round up to a whole minute as in Slurm
        ("5:00", "5m"),
        ("01:30:00", "1h30m"),
        ("1:00:01", "1h1m"),
        ("2-0", "48h"),
        ("1-12", "36h"),
        ("1-02:30", "26h30m"),
        ("0-00:05:00", "5m"),
        ("3-00:00:30", "72h1m"),
    ] {
        let c = converted(&[&format!("#SBATCH --time={written}")]);
        assert!(c.unconverted.is_empty(), "{written}: {:?}", c.unconverted);
        let limit = c.spec.time_limit.unwrap();
        assert_eq!(
            serde_json::to_value(&limit).unwrap(),
            json!(want),
            "{written}"
        );
    }
    for bad in [
        "UNLIMITED",
        "infinite",
        "0",
        "1:2:3:4",
        "ten",
        "1-",
        "-5",
        "1-2:3:4:5",
    ] {
        let c = converted(&[&format!("#SBATCH -t {bad}")]);
        assert_eq!(c.spec.time_limit, None, "{bad}");
        assert_eq!(reported(&c), [(2, format!("-t {bad}").as_str())], "{bad}");
    }
}

#[test]
fn memory_sizes_become_quantities() {
    for (written, want) in [
        ("4000", "4000Mi"),
        ("4G", "4Gi"),
        ("512m", "512Mi"),
        ("1T", "1Ti"),
        ("100K", "100Ki"),
    ] {
        let c = converted(&[&format!("#SBATCH --mem={written}")]);
        assert_eq!(
            c.spec.memory_per_node,
            Some(Quantity(want.into())),
            "{written}"
        );
        let c = converted(&[&format!("#SBATCH --mem-per-cpu {written}")]);
        assert_eq!(
            c.spec.memory_per_cpu,
            Some(Quantity(want.into())),
            "{written}"
        );
    }
    for bad in ["0", "4X", "G", "-1"] {
        let c = converted(&[&format!("#SBATCH --mem={bad}")]);
        assert_eq!(c.spec.memory_per_node, None, "{bad}");
        assert_eq!(c.unconverted.len(), 1, "{bad}");
    }
    // sbatch refuses both: the later is reported, the earlier kept.
    let c = converted(&["#SBATCH --mem=4G", "#SBATCH --mem-per-cpu=1G"]);
    assert_eq!(c.spec.memory_per_node, Some(Quantity("4Gi".into())));
    assert_eq!(c.spec.memory_per_cpu, None);
    assert_eq!(reported(&c), [(3, "--mem-per-cpu=1G")]);
    assert!(
        c.unconverted[0]
            .reason
            .contains("--mem together with --mem-per-cpu")
    );
}

#[test]
fn gpu_and_mpi_layouts() {
    let c = converted(&[
        "#SBATCH --nodes=2-4 --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=a100:4 --gpus-per-task=1",
        "#SBATCH --exclusive",
        "#SBATCH --tres-per-task=cpu=2",
        "#SBATCH -G 8",
    ]);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.nodes.as_deref(), Some("2-4"));
    assert_eq!(c.spec.tasks_per_node, Some(8));
    assert_eq!(c.spec.gpus_per_node.as_deref(), Some("a100:4"));
    assert_eq!(c.spec.gpus_per_task.as_deref(), Some("1"));
    assert_eq!(c.spec.exclusive, Some(Exclusive::Node));
    assert_eq!(c.spec.tres_per_task.as_deref(), Some("cpu=2"));
    assert_eq!(c.spec.tres, None, "the new name is written");
    assert_eq!(
        c.spec
            .extra_options
            .as_ref()
            .and_then(|e| e.get("tres_per_job")),
        Some(&json!("gres/gpu:8"))
    );

    for (written, want) in [("user", Exclusive::User), ("mcs", Exclusive::Mcs)] {
        let c = converted(&[&format!("#SBATCH --exclusive={written}")]);
        assert_eq!(c.spec.exclusive, Some(want));
    }
    // sbatch refuses --exclusive with --oversubscribe: the later is reported, the earlier kept.
    let c = converted(&["#SBATCH --exclusive", "#SBATCH -s"]);
    assert_eq!(c.spec.exclusive, Some(Exclusive::Node));
    assert_eq!(c.spec.extra_options, None);
    assert_eq!(reported(&c), [(3, "-s")]);
    let c = converted(&["#SBATCH -s", "#SBATCH --exclusive=user"]);
    assert_eq!(c.spec.exclusive, None);
    assert_eq!(
        c.spec.extra_options.as_ref().and_then(|e| e.get("shared")),
        Some(&json!(["oversubscribe"]))
    );
    assert_eq!(reported(&c), [(3, "--exclusive=user")]);

    for bad in [
        "--exclusive=topo",
        "--gpus-per-node=0",
        "--gpus-per-node=a100:2,v100:1",
        "--ntasks-per-node=0",
        "--nodes=4-2",
        "--nodes=1,2,4",
    ] {
        let c = converted(&[&format!("#SBATCH {bad}")]);
        assert_eq!(reported(&c), [(2, bad)], "{bad}");
    }
    // Two ways to ask for GPUs per node: the later is reported.
    let c = converted(&["#SBATCH --gres=gpu:2", "#SBATCH --gpus-per-node=2"]);
    assert_eq!(c.spec.gres.as_deref(), Some("gpu:2"));
    assert_eq!(c.spec.gpus_per_node, None);
    assert_eq!(reported(&c), [(3, "--gpus-per-node=2")]);
}

#[test]
fn arrays_outputs_environment_and_directory() {
    let c = converted(&[
        "#SBATCH --array=0-15:4%2",
        "#SBATCH -o logs/%x-%A_%a.out -e /scratch/%u/%j.err",
        "#SBATCH --export=NONE,OMP_NUM_THREADS=4,MODE=fast",
        "#SBATCH -D /scratch/run",
        "#SBATCH --mail-type=end,FAIL --mail-user=a@example.org",
    ]);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.array.as_deref(), Some("0-15:4%2"));
    assert_eq!(c.spec.standard_output.as_deref(), Some("logs/%x-%A_%a.out"));
    assert_eq!(c.spec.standard_error.as_deref(), Some("/scratch/%u/%j.err"));
    assert_eq!(
        c.spec.environment,
        BTreeMap::from([
            ("MODE".to_owned(), "fast".to_owned()),
            ("OMP_NUM_THREADS".to_owned(), "4".to_owned())
        ])
    );
    assert_eq!(c.spec.working_directory.as_deref(), Some("/scratch/run"));
    let extra = c.spec.extra_options.unwrap();
    assert_eq!(extra["mail_type"], json!(["END", "FAIL"]));
    assert_eq!(extra["mail_user"], json!("a@example.org"));

    for bad in [
        "--array=1-",
        "--array=a-b",
        "--export=ALL",
        "--export=ALL,X=1",
        "--export=HOME",
        "--chdir=run",
        "--mail-type=SOMETIMES",
    ] {
        let c = converted(&[&format!("#SBATCH {bad}")]);
        assert_eq!(reported(&c), [(2, bad)], "{bad}");
    }
}

/// sbatch's mail types under the names slurmrestd takes (it takes an unknown name with only a
/// warning, and the job then sends no mail for it); NONE silences the others, as in sbatch.
#[test]
fn mail_types_are_renamed_to_what_slurmrestd_takes() {
    for (types, want) in [
        (
            "ALL",
            json!([
                "BEGIN",
                "END",
                "FAIL",
                "REQUEUE",
                "STAGE_OUT",
                "INVALID_DEPENDENCY"
            ]),
        ),
        (
            "time_limit,TIME_LIMIT_90,TIME_LIMIT_80,TIME_LIMIT_50",
            json!(["TIME=100%", "TIME=90%", "TIME=80%", "TIME=50%"]),
        ),
        (
            "INVALID_DEPEND,ARRAY_TASKS,END,ALL",
            json!([
                "INVALID_DEPENDENCY",
                "ARRAY_TASKS",
                "END",
                "BEGIN",
                "FAIL",
                "REQUEUE",
                "STAGE_OUT"
            ]),
        ),
    ] {
        let c = converted(&[&format!("#SBATCH --mail-type={types}")]);
        assert!(c.unconverted.is_empty(), "{types}: {:?}", c.unconverted);
        let extra = c.spec.extra_options.unwrap_or_default();
        assert_eq!(extra.get("mail_type"), Some(&want), "{types}");
    }
    for silenced in ["NONE", "END,none"] {
        let c = converted(&[&format!("#SBATCH --mail-type={silenced}")]);
        assert!(c.unconverted.is_empty(), "{silenced}: {:?}", c.unconverted);
        let extra = c.spec.extra_options.unwrap_or_default();
        assert_eq!(extra.get("mail_type"), None, "{silenced}");
    }
    // Each option adds to the earlier ones, as sbatch ORs them (NONE adds nothing); the
    // command line's too.
    let script = script(&[
        "#SBATCH --mail-type=BEGIN",
        "#SBATCH --mail-type=END,BEGIN",
        "#SBATCH --mail-type=NONE",
    ]);
    let c = convert_with(&script, "main", &words(&["--mail-type=FAIL"])).unwrap();
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    let extra = c.spec.extra_options.unwrap_or_default();
    assert_eq!(
        extra.get("mail_type"),
        Some(&json!(["BEGIN", "END", "FAIL"]))
    );
}

/// A relative output or error file resolves under the job's working directory: sbatch's is
/// the directory it ran in, a SlurmJob's without an absolute --chdir is /tmp on the nodes.
/// Carried as written, but reported.
#[test]
fn relative_output_files_without_a_directory_are_reported() {
    let caveats = |c: &Conversion| {
        c.caveats
            .iter()
            .map(|c| (c.origin.line().expect("a script line"), c.option.clone()))
            .collect::<Vec<_>>()
    };
    let c = converted(&["#SBATCH -o logs/%j.out", "#SBATCH --error=%x.err"]);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.standard_output.as_deref(), Some("logs/%j.out"));
    assert_eq!(
        caveats(&c),
        [
            (2, "-o logs/%j.out".to_owned()),
            (3, "--error=%x.err".to_owned())
        ]
    );
    assert!(c.caveats[0].reason.contains("/tmp"), "{}", c.caveats[0]);
    assert!(c.caveats[0].reason.contains("--chdir"), "{}", c.caveats[0]);
    // A relative --chdir is not carried (reported as such): the files still land in /tmp.
    let c = converted(&["#SBATCH -D run -o out.log"]);
    assert_eq!(reported(&c), [(2, "-D run")]);
    assert_eq!(caveats(&c), [(2, "-o out.log".to_owned())]);
    for fine in [
        &[
            "#SBATCH -o logs/%j.out -e err/%j",
            "#SBATCH --chdir=/scratch/run",
        ][..],
        &["#SBATCH -o /scratch/%j.out -e /scratch/%j.err"],
        &["#SBATCH -o none -e NONE"],
        &["#SBATCH --job-name=no-files"],
    ] {
        let c = converted(fine);
        assert_eq!(caveats(&c), [], "{fine:?}");
    }
}

/// sbatch reads `--export`'s NONE and ALL in any case.
#[test]
fn export_none_and_all_in_any_case() {
    for none in ["none", "None", "NONE"] {
        let c = converted(&[&format!("#SBATCH --export={none},MODE=fast")]);
        assert!(c.unconverted.is_empty(), "{none}: {:?}", c.unconverted);
        assert_eq!(
            c.spec.environment,
            BTreeMap::from([("MODE".to_owned(), "fast".to_owned())]),
            "{none}"
        );
    }
    for all in ["--export=all", "--export=All,X=1"] {
        let c = converted(&[&format!("#SBATCH {all}")]);
        assert_eq!(reported(&c), [(2, all)], "{all}");
        assert!(
            c.unconverted[0]
                .reason
                .contains("submitting shell's environment")
        );
        assert!(c.spec.environment.is_empty(), "{all}");
    }
}

/// A second `--export` replaces the first, as in sbatch (which keeps the last one): the command
/// line's replaces the script's, and `NONE` there leaves no variable of the script's.
#[test]
fn a_later_export_replaces_an_earlier_one() {
    let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let c = converted(&["#SBATCH --export=DEBUG=1,A=x", "#SBATCH --export=MODE=fast"]);
    assert_eq!(c.spec.environment, env(&[("MODE", "fast")]));
    let script = script(&["#SBATCH --export=DEBUG=1"]);
    let c = convert_with(&script, "main", &words(&["--export=NONE"])).unwrap();
    assert_eq!(c.spec.environment, env(&[]));
    let c = convert_with(&script, "main", &words(&["--export=MODE=x"])).unwrap();
    assert_eq!(c.spec.environment, env(&[("MODE", "x")]));
    // sbatch would add the user's login environment; said once, for the option that counts.
    assert_eq!(c.caveats.len(), 1, "{:?}", c.caveats);
    assert_eq!(c.caveats[0].option, "--export=MODE=x");
    assert!(
        c.caveats[0].reason.contains("login environment"),
        "{}",
        c.caveats[0]
    );
    // One not converted (reported) leaves the earlier one as it was.
    let c = convert_with(&script, "main", &words(&["--export=ALL"])).unwrap();
    assert_eq!(c.spec.environment, env(&[("DEBUG", "1")]));
    assert_eq!(c.unconverted.len(), 1, "{:?}", c.unconverted);
}

/// sbatch discards a stream written to `none` (any case): it is `/dev/null`, not a file.
#[test]
fn none_as_output_or_error_is_dev_null() {
    for (lines, out, err) in [
        (
            &["#SBATCH -o none -e NONE"][..],
            Some("/dev/null"),
            Some("/dev/null"),
        ),
        (&["#SBATCH --output=None"], Some("/dev/null"), None),
        (&["#SBATCH --error none"], None, Some("/dev/null")),
        // Only the whole name: these are files.
        (
            &["#SBATCH -o none.log -e /scratch/none"],
            Some("none.log"),
            Some("/scratch/none"),
        ),
    ] {
        let c = converted(lines);
        assert!(c.unconverted.is_empty(), "{lines:?}: {:?}", c.unconverted);
        assert_eq!(c.spec.standard_output.as_deref(), out, "{lines:?}");
        assert_eq!(c.spec.standard_error.as_deref(), err, "{lines:?}");
    }
}

#[test]
fn every_option_not_carried_is_reported_with_its_line() {
    let c = converted(&[
        "#SBATCH --job-name=keep",
        "#SBATCH --dependency=afterok:123 --comment=x",
        "#SBATCH --begin=now+1hour --no-such-option -Z --distribution cyclic",
        "#SBATCH stray --requeue --parsable",
        "#SBATCH --mem",
        "#SBATCH --hold=yes --n=3",
        "#SBATCH --=x",
    ]);
    assert_eq!(
        reported(&c),
        [
            (3, "--dependency=afterok:123"),
            (3, "--comment=x"),
            (4, "--begin=now+1hour"),
            (4, "--no-such-option"),
            (4, "-Z"),
            (4, "--distribution cyclic"),
            (5, "stray"),
            (5, "--parsable"),
            (6, "--mem"),
            (7, "--hold=yes"),
            (7, "--n=3"),
            (8, "--=x"),
        ]
    );
    let reason = |option: &str| {
        c.unconverted
            .iter()
            .find(|u| u.option == option)
            .map(|u| u.reason.clone())
            .unwrap()
    };
    assert!(reason("--dependency=afterok:123").contains("--depends-on"));
    assert!(reason("--comment=x").contains("ownership tag"));
    assert!(reason("--no-such-option").contains("not an sbatch option"));
    assert!(reason("--parsable").contains("sbatch command"));
    assert!(reason("--mem").contains("needs a value"));
    assert!(reason("--n=3").contains("ambiguous"));
    assert_eq!(reason("--=x"), "is not an sbatch option");
    assert!(reason("--distribution cyclic").contains("no SlurmJob field"));
    // What could be carried was.
    assert_eq!(c.spec.name.as_deref(), Some("keep"));
    assert_eq!(
        c.spec.extra_options.as_ref().and_then(|e| e.get("requeue")),
        Some(&json!(true))
    );
    assert_eq!(
        c.unconverted[0].to_string(),
        format!(
            "line 3: --dependency=afterok:123: {}",
            c.unconverted[0].reason
        )
    );
}

/// What only Slurm administrators may choose (whom the job runs as, its priority, a
/// reservation, the cluster) is reported with admission's reason for the same `extraOptions`
/// key, never carried (sbatch itself takes `--uid`/`--gid` from root only).
#[test]
fn privileged_options_are_reported_as_refused() {
    let c = convert_with(
        &script(&[
            "#SBATCH --uid=0 --gid=0",
            "#SBATCH --priority=TOP --reservation=maint",
            "#SBATCH -M other --mcs-label=x --cluster-constraint=c --container=/img",
        ]),
        "main",
        &words(&["--uid", "alice", "--container-id=c1"]),
    )
    .unwrap();
    assert_eq!(
        located(&c),
        [
            (Origin::CommandLine, "--uid alice"),
            (Origin::CommandLine, "--container-id=c1"),
            (Origin::Line(2), "--uid=0"),
            (Origin::Line(2), "--gid=0"),
            (Origin::Line(3), "--priority=TOP"),
            (Origin::Line(3), "--reservation=maint"),
            (Origin::Line(4), "-M other"),
            (Origin::Line(4), "--mcs-label=x"),
            (Origin::Line(4), "--cluster-constraint=c"),
            (Origin::Line(4), "--container=/img"),
        ]
    );
    let reasons: Vec<&str> = c.unconverted.iter().map(|u| u.reason.as_str()).collect();
    for (reason, key) in reasons.iter().zip([
        "user_id",
        "container_id",
        "user_id",
        "group_id",
        "priority",
        "reservation",
        "clusters",
        "mcs_label",
        "cluster_constraint",
        "container",
    ]) {
        assert_eq!(Some(*reason), extra_option_refusal(key), "{key}");
        assert!(reason.starts_with("is refused: "), "{reason}");
    }
    // Nothing of them reached the spec: it holds the cluster and the script only.
    let spec = serde_json::to_value(&c.spec).unwrap();
    let fields: Vec<&str> = spec
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["clusterName", "script"]);
}

/// Words as sbatch 24.11 splits a directive (checked with the real sbatch:
/// `#SBATCH --job-name=run#3 -p nosuchpart` made a job named `run` in the default partition,
/// and `#SBATCH --comment=a\ b` one whose comment is `a b`).
#[test]
fn directive_words_split_as_sbatch_splits_them() {
    for (text, want) in [
        (" --job-name=run#3 -p gpu", &["--job-name=run"][..]),
        (" -p debug # trailing comment", &["-p", "debug"]),
        (" -p debug #", &["-p", "debug"]),
        (" #-p debug", &[]),
        (" --comment=a\\ b -p x", &["--comment=a b", "-p", "x"]),
        (
            " --job-name=run\\#3 -p gpu",
            &["--job-name=run#3", "-p", "gpu"],
        ),
        (
            " --job-name='run#3' -p gpu",
            &["--job-name=run#3", "-p", "gpu"],
        ),
        (
            " --job-name=\"a b\"c -p gpu",
            &["--job-name=a bc", "-p", "gpu"],
        ),
        (" --comment=\"say \\\"hi\\\"\"", &["--comment=say \"hi\""]),
        (" --comment=\"\" -p x", &["--comment=", "-p", "x"]),
        (" \"\"", &[""]),
    ] {
        assert_eq!(super::words(text, 2).unwrap(), want, "{text:?}");
    }
    assert_eq!(
        super::words(" --comment='open", 2),
        Err(SbatchError::UnterminatedQuote { line: 2 })
    );
    // Through a whole script: the rest of the line after `#` is not an option.
    let c = converted(&["#SBATCH --job-name=run#3 -p gpu"]);
    assert_eq!(c.spec.name.as_deref(), Some("run"));
    assert_eq!(c.spec.partition, None);
}

/// sbatch's blanks are C's `isspace`, ASCII only (its loop over a line's bytes): a no-break
/// space is part of a word, and a line holding one is a command that ends the directives.
#[test]
fn only_ascii_blanks_separate_words_and_make_blank_lines() {
    assert_eq!(
        super::words(" --job-name=a\u{a0}b\t-p\u{0b}x", 2).unwrap(),
        ["--job-name=a\u{a0}b", "-p", "x"]
    );
    let c = converted(&[
        "#SBATCH --job-name=first",
        "\u{a0}",
        "#SBATCH --partition=too-late",
    ]);
    assert_eq!(c.spec.name.as_deref(), Some("first"));
    assert_eq!(c.spec.partition, None);
    let c = converted(&[
        "#SBATCH --job-name=first",
        " \t\u{0b}\u{0c}",
        "#SBATCH --partition=debug",
    ]);
    assert_eq!(c.spec.partition.as_deref(), Some("debug"));
}

/// A script longer than `spec.script` holds is refused naming the field, and a source without
/// end (`/dev/zero`) is read only that far; one just at the limit is read whole.
#[test]
fn a_script_longer_than_spec_script_allows_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let at_limit = dir.path().join("at-limit.sh");
    let mut text = "#!/bin/sh\n".to_owned();
    // Multi-byte characters: the limit counts characters, as the API server's maxLength does.
    text.extend(std::iter::repeat_n('é', SCRIPT_MAX_CHARS - text.len()));
    std::fs::write(&at_limit, &text).unwrap();
    assert_eq!(
        read_script(&at_limit).unwrap().chars().count(),
        SCRIPT_MAX_CHARS
    );
    text.push('\n');
    let over = dir.path().join("over.sh");
    std::fs::write(&over, &text).unwrap();
    for path in [over.as_path(), std::path::Path::new("/dev/zero")] {
        let error = read_script(path).unwrap_err();
        assert!(
            matches!(&error, CliError::Usage(m) if m.contains("longer than spec.script allows")),
            "{path:?}: {error:?}"
        );
    }
    // The CRD's own limit.
    let crd =
        serde_json::to_value(<crate::crd::SlurmJob as kube::CustomResourceExt>::crd()).unwrap();
    let script = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["script"];
    assert_eq!(script["maxLength"], SCRIPT_MAX_CHARS, "{script}");
}

#[test]
fn unreadable_scripts_are_errors() {
    assert_eq!(
        convert("echo hi\n", "main"),
        Err(SbatchError::NoInterpreter)
    );
    assert_eq!(
        convert("#!/bin/sh\n#SBATCH --job-name=\"open\n", "main"),
        Err(SbatchError::UnterminatedQuote { line: 2 })
    );
}

/// sbatch 24.11 refuses a script with `\r\n` anywhere ("Batch script contains DOS line
/// breaks"), while a lone `\r` is a blank to it (`#SBATCH -t 5\rtrue` was refused for the
/// word `true`; `echo a\rb` after the directives ran).
#[test]
fn dos_line_breaks_are_refused_with_the_first_line() {
    for (text, line) in [
        ("#!/bin/bash\r\n#SBATCH -t 5\r\ntrue\r\n", 1),
        ("#!/bin/bash\n#SBATCH -t 5\r\ntrue\n", 2),
        // After the directives too, and on a last line.
        ("#!/bin/bash\n#SBATCH -t 5\ntrue\necho done\r\n", 4),
    ] {
        assert_eq!(
            convert(text, "main"),
            Err(SbatchError::DosLineBreaks { line }),
            "{text:?}"
        );
    }
    let message = SbatchError::DosLineBreaks { line: 3 }.to_string();
    for part in ["line 3", "\\r\\n", "DOS line breaks", "dos2unix"] {
        assert!(message.contains(part), "{part} missing in {message}");
    }
    // A lone \r is a blank: between words of an #SBATCH line, or in a command.
    let c = convert("#!/bin/bash\n#SBATCH -t 5\rtrue\n", "main").unwrap();
    assert_eq!(reported(&c), [(2, "true")]);
    let c = convert("#!/bin/bash\n#SBATCH -t 5\ntrue\necho a\rb\n", "main").unwrap();
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert!(c.spec.time_limit.is_some());
}

#[test]
fn names_and_dependencies() {
    assert_eq!(object_name("My_Job.v2").as_deref(), Some("my-job-v2"));
    assert_eq!(object_name("--train--").as_deref(), Some("train"));
    assert_eq!(object_name("___"), None);
    assert_eq!(object_name(&"a".repeat(100)).map(|n| n.len()), Some(63));
    assert_eq!(
        dependency("prep").unwrap(),
        JobDependency {
            name: "prep".into(),
            type_: DependencyType::AfterOk
        }
    );
    assert_eq!(
        dependency("prep:afternotok").unwrap().type_,
        DependencyType::AfterNotOk
    );
    assert!(dependency("prep:after").unwrap_err().contains("after"));
    assert!(dependency("Bad_Name").is_err());
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|w| (*w).to_owned()).collect()
}

/// The words after our `--` as sbatch's getopt splits them: options (with their values), then
/// the first other word (or the one after a `--`) is the script, the rest its arguments.
#[test]
fn the_command_line_splits_into_options_script_and_arguments() {
    for (given, options, script, arguments) in [
        (
            &["-p", "gpu", "-t", "10", "job.sh"][..],
            &["-p", "gpu", "-t", "10"][..],
            Some("job.sh"),
            &[][..],
        ),
        (
            &["-n", "4", "--time=5", "job.sh", "a", "-b"],
            &["-n", "4", "--time=5"],
            Some("job.sh"),
            &["a", "-b"],
        ),
        // `-` is stdin; grouped flags with a value.
        (&["-Hp", "debug", "-"], &["-Hp", "debug"], Some("-"), &[]),
        // An optional value is only ever attached: job.sh is not --exclusive's.
        (
            &["--exclusive", "job.sh"],
            &["--exclusive"],
            Some("job.sh"),
            &[],
        ),
        // `--` ends the options, as in sbatch.
        (
            &["-t", "9", "--", "-odd.sh"],
            &["-t", "9", "--"],
            Some("-odd.sh"),
            &[],
        ),
        (&["job.sh"], &[], Some("job.sh"), &[]),
        // A value taken for an option, as getopt takes it: no script left.
        (&["-t", "job.sh"], &["-t", "job.sh"], None, &[]),
        (&[], &[], None, &[]),
    ] {
        let split = CommandLine::split(&words(given));
        assert_eq!(
            split,
            CommandLine {
                options: words(options),
                script: script.map(str::to_owned),
                arguments: words(arguments),
            },
            "{given:?}"
        );
    }
}

/// sbatch 24.11: script `#SBATCH -t 5`, `sbatch -t 9 script` gave the job 9:00.
#[test]
fn command_line_options_take_precedence_over_the_script() {
    let script = script(&[
        "#SBATCH -t 5 -p debug --job-name=from-script",
        "#SBATCH --exclusive",
    ]);
    let c = convert_with(&script, "main", &words(&["-t", "9", "-p", "gpu", "-s"])).unwrap();
    assert_eq!(
        c.spec
            .time_limit
            .as_ref()
            .map(|l| serde_json::to_value(l).unwrap()),
        Some(json!("9m"))
    );
    assert_eq!(c.spec.partition.as_deref(), Some("gpu"));
    assert_eq!(c.spec.name.as_deref(), Some("from-script"));
    // sbatch refuses --exclusive with --oversubscribe: the command line's is kept, the
    // script's reported.
    assert_eq!(c.spec.exclusive, None);
    assert_eq!(
        c.spec.extra_options.as_ref().and_then(|e| e.get("shared")),
        Some(&json!(["oversubscribe"]))
    );
    assert_eq!(reported(&c), [(3, "--exclusive")]);
    // Without the command line, the script's.
    let c = convert(&script, "main").unwrap();
    assert_eq!(c.spec.partition.as_deref(), Some("debug"));
}

/// What the command line cannot carry is reported as the script's is, located on the command
/// line (first, in the order written).
#[test]
fn command_line_options_not_carried_are_reported_as_from_the_command_line() {
    let c = convert_with(
        &script(&["#SBATCH --begin=now+1hour"]),
        "main",
        &words(&["--signal=B:USR1@300", "--parsable", "-o", "out.log"]),
    )
    .unwrap();
    let got = located(&c);
    assert_eq!(
        got,
        [
            (Origin::CommandLine, "--signal=B:USR1@300"),
            (Origin::CommandLine, "--parsable"),
            (Origin::Line(2), "--begin=now+1hour"),
        ]
    );
    assert_eq!(
        c.unconverted[0].to_string(),
        "command line: --signal=B:USR1@300: has no SlurmJob field"
    );
    assert!(c.unconverted[2].to_string().starts_with("line 2: --begin"));
    // A caveat too.
    assert_eq!(c.caveats.len(), 1, "{:?}", c.caveats);
    assert_eq!(c.caveats[0].origin, Origin::CommandLine);
    assert!(
        c.caveats[0]
            .to_string()
            .starts_with("command line: -o out.log: is relative"),
        "{}",
        c.caveats[0]
    );
}

/// sbatch 24.11 refuses `--mem` with `--mem-per-cpu` wherever each is ("--mem, --mem-per-cpu, and
/// --mem-per-gpu are mutually exclusive", also script --mem=1G with command line
/// --mem-per-cpu=100): still reported, but the script's is the one dropped.
#[test]
fn in_a_refused_pair_the_command_line_option_is_kept() {
    let c = convert_with(
        &script(&["#SBATCH --mem=1G"]),
        "main",
        &words(&["--mem-per-cpu=100"]),
    )
    .unwrap();
    assert_eq!(c.spec.memory_per_cpu, Some(Quantity("100Mi".into())));
    assert_eq!(c.spec.memory_per_node, None);
    assert_eq!(reported(&c), [(2, "--mem=1G")]);
    let reason = &c.unconverted[0].reason;
    assert!(
        reason.contains("sbatch refuses --mem together with --mem-per-cpu"),
        "{reason}"
    );
    assert!(
        reason.contains("command line's --mem-per-cpu=100 is kept"),
        "{reason}"
    );
    // The other way round, and a GPU pair.
    let c = convert_with(
        &script(&["#SBATCH --mem-per-cpu=100", "#SBATCH --gpus-per-node=2"]),
        "main",
        &words(&["--mem=1G", "--gres=gpu:4"]),
    )
    .unwrap();
    assert_eq!(c.spec.memory_per_node, Some(Quantity("1Gi".into())));
    assert_eq!(c.spec.memory_per_cpu, None);
    assert_eq!(c.spec.gres.as_deref(), Some("gpu:4"));
    assert_eq!(c.spec.gpus_per_node, None);
    assert_eq!(
        reported(&c),
        [(2, "--mem-per-cpu=100"), (3, "--gpus-per-node=2")]
    );
    // Both on the command line: the later is reported, as in a script.
    let c = convert_with(
        &script(&[]),
        "main",
        &words(&["--mem=1G", "--mem-per-cpu=100"]),
    )
    .unwrap();
    assert_eq!(c.spec.memory_per_node, Some(Quantity("1Gi".into())));
    assert_eq!(c.unconverted.len(), 1);
    assert_eq!(c.unconverted[0].origin, Origin::CommandLine);
    assert_eq!(c.unconverted[0].option, "--mem-per-cpu=100");
}

/// Words after the options given to `convert_with` are not dropped unsaid.
#[test]
fn words_after_the_command_line_options_are_reported() {
    let c = convert_with(&script(&[]), "main", &words(&["-t", "9", "job.sh", "x"])).unwrap();
    let got = located(&c);
    assert_eq!(
        got,
        [(Origin::CommandLine, "job.sh"), (Origin::CommandLine, "x")]
    );
    assert!(c.spec.time_limit.is_some());
}

/// `#SLURM` lines are read as `#SBATCH` ones (sbatch does, with a warning); `#PBS` and `#BSUB`
/// lines, which sbatch also applies (after the first command too, and one kind only: `#BSUB`
/// first), are reported: a SlurmJob has nothing to apply them with, and dropping them would
/// run the job otherwise than sbatch. Only an `#SBATCH --ignore-pbs` line turns that off, as
/// in sbatch (which reads its command line's only after translating them).
#[test]
fn other_directive_spellings_are_read_or_reported_as_sbatch_reads_them() {
    let lines = [
        "#SBATCH -t 24:00:00",
        "#SLURM --job-name=old-style",
        "#PBS -l walltime=01:00:00",
        "# PBS -l nodes=2 (a comment to sbatch too)",
        "module load x",
        "#PBS -l mem=4gb",
    ];
    let c = converted(&lines);
    assert_eq!(c.spec.name.as_deref(), Some("old-style"));
    assert_eq!(
        reported(&c),
        [(4, "#PBS -l walltime=01:00:00"), (7, "#PBS -l mem=4gb")]
    );
    assert!(
        c.unconverted[0].reason.contains("--ignore-pbs"),
        "{}",
        c.unconverted[0]
    );

    // One kind only: #BSUB lines, when there are any, and then not the #PBS ones.
    let with_bsub: Vec<&str> = lines.iter().copied().chain(["#BSUB -W 60"]).collect();
    assert_eq!(reported(&converted(&with_bsub)), [(8, "#BSUB -W 60")]);

    // Past 100 lines that are not comments, sbatch looks no further.
    let mut long: Vec<String> = vec!["echo start".into(); 101];
    long.push("#PBS -l walltime=1:00:00".into());
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    assert!(converted(&long).unconverted.is_empty());

    // `#SBATCH --ignore-pbs`: none is read, nor is the option reported.
    let ignored: Vec<&str> = ["#SBATCH --ignore-pbs"]
        .into_iter()
        .chain(lines.iter().copied())
        .collect();
    let c = converted(&ignored);
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    assert_eq!(c.spec.name.as_deref(), Some("old-style"));
    // On the command line it is taken, but sbatch reads it too late to skip them.
    let c = convert_with(&script(&lines), "main", &words(&["--ignore-pbs"])).unwrap();
    assert_eq!(reported(&c).len(), 2, "{:?}", c.unconverted);
}

/// A create whose outcome the answer does not tell (a 504 after the API server made it; a 409
/// to kube's retry of that POST) is read back: the SlurmJob carrying this call's submission mark
/// is reported created, not as someone else's to delete or rename around. A 409 for a SlurmJob
/// without that mark is someone else's; a refusal (422) is not read back at all.
#[tokio::test]
async fn a_create_answered_ambiguously_is_read_back_by_its_own_mark() {
    use crate::controller::test_support::ApiServerVerifier;
    use http::{Method, Response, StatusCode};
    use kube::client::Body;

    let failure = |code: u16, reason: &str| {
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(
                serde_json::to_vec(&serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("{reason} (test)"), "reason": reason, "code": code,
                }))
                .unwrap(),
            ))
            .unwrap()
    };
    let object = |body: &serde_json::Value| {
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    };
    let job = convert_with(&script(&["#!/bin/sh", "true"]), "main", &[])
        .unwrap()
        .spec;
    let job = SlurmJob::new("train", job);
    // The create's first answer (`code`, `reason`), and what the read back finds: `None`
    // not read, `Some(None)` nothing, `Some(Some(mark))` a SlurmJob with that mark (`"ours"`:
    // the one the create sent).
    for (code, reason, found, created) in [
        (504, "Timeout", Some(Some("ours")), true),
        (409, "AlreadyExists", Some(Some("ours")), true),
        (409, "AlreadyExists", Some(Some("another call's")), false),
        (503, "ServiceUnavailable", Some(None), false),
        (422, "Invalid", None, false),
    ] {
        let (service, handle) = tower_test::mock::pair::<http::Request<Body>, Response<Body>>();
        let mut server = ApiServerVerifier::from_handle(handle);
        let api: kube::Api<SlurmJob> =
            kube::Api::namespaced(kube::Client::new(service, "team-a"), "team-a");
        let serve = tokio::spawn(async move {
            let (call, send) = server.next().await;
            assert_eq!(call.method, Method::POST, "{call:?}");
            let mark = call.body["metadata"]["annotations"][SUBMISSION_ANNOTATION].clone();
            assert!(mark.as_str().is_some_and(|m| m.len() == 36), "{mark}");
            send.send_response(failure(code, reason));
            if let Some(found) = found {
                let (call, send) = server.next().await;
                assert_eq!(call.method, Method::GET, "{call:?}");
                assert_eq!(
                    call.path,
                    "/apis/slurm.rs/v1alpha1/namespaces/team-a/slurmjobs/train"
                );
                send.send_response(match found {
                    None => failure(404, "NotFound"),
                    Some(which) => {
                        let mark = if which == "ours" {
                            mark.clone()
                        } else {
                            which.into()
                        };
                        object(&serde_json::json!({
                            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                            "metadata": {"name": "train", "namespace": "team-a",
                                "annotations": {SUBMISSION_ANNOTATION: mark}},
                            "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n"},
                        }))
                    }
                });
            }
            server.expect_no_more_calls().await;
        });
        let outcome = create_once(&api, job.clone(), "team-a").await;
        serve.await.unwrap();
        match (created, outcome) {
            (true, Ok(name)) => assert_eq!(name, "train"),
            (false, Err(CliError::Usage(message))) if code == 409 => {
                assert!(message.contains("already exists"), "{message}")
            }
            // The API server failing for now: try again; it may have made the SlurmJob.
            (false, Err(CliError::Unavailable(message))) if code >= 500 => {
                assert!(
                    message.starts_with("cannot create the SlurmJob")
                        && message.contains("it may have been created"),
                    "{message}"
                )
            }
            (false, Err(CliError::Usage(message))) if code < 500 => {
                assert!(
                    message.starts_with("cannot create the SlurmJob"),
                    "{message}"
                )
            }
            (created, outcome) => panic!("{code} {found:?}: created {created}, got {outcome:?}"),
        }
    }
}
