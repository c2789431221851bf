//! `slurm-operator check`: is this slurmrestd usable by the operator?

use std::fmt::Write as _;

use clap::Args;

use super::{CliError, ConnectArgs};
use crate::slurm::types::{ClusterInfo, Node, NodeCounts, Partition};

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// What `check` found.
#[derive(Debug)]
pub struct Report {
    pub info: ClusterInfo,
    pub partitions: Vec<Partition>,
    pub nodes: Vec<Node>,
}

pub async fn run(args: &CheckArgs) -> Result<Report, CliError> {
    let client = args.connect.client()?;
    // /diag checks the token (/ping does not), so it goes first: a bad token fails here.
    let info = client.cluster_info().await?;
    let partitions = client.partitions().await?;
    let nodes = client.nodes(None).await?.into_items().unwrap_or_default();
    Ok(Report {
        info,
        partitions,
        nodes,
    })
}

/// `check`'s exit code when slurmrestd answered but no slurmctld did: the operator could reach
/// it and still run nothing (the code of an unreachable slurmrestd).
pub const EXIT_CONTROLLER_DOWN: u8 = 3;

impl Report {
    /// The exit code after the report: 0 when the cluster can be used, else
    /// [`EXIT_CONTROLLER_DOWN`] (a script sees what the report says).
    pub fn exit_code(&self) -> u8 {
        if self.info.controller_responding {
            0
        } else {
            EXIT_CONTROLLER_DOWN
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let info = &self.info;
        let _ = writeln!(out, "cluster:     {}", info.cluster_name);
        let _ = writeln!(out, "slurm:       {}", info.release);
        let _ = writeln!(
            out,
            "api:         {} ({})",
            info.api_version, info.data_parser
        );
        let _ = writeln!(
            out,
            "controller:  {}",
            if info.controller_responding {
                "responding"
            } else {
                "NOT responding"
            }
        );
        let partitions: Vec<String> = self
            .partitions
            .iter()
            .map(|p| {
                format!(
                    "{} ({}, {} nodes)",
                    p.name,
                    p.state.join("+"),
                    p.total_nodes.unwrap_or_default()
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "partitions:  {}",
            if partitions.is_empty() {
                "none".into()
            } else {
                partitions.join(", ")
            }
        );
        let _ = writeln!(
            out,
            "nodes:       {}",
            NodeCounts::count(self.nodes.iter().map(|n| &n.state))
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of a cluster whose slurmctld does not answer says so, and so does the exit
    /// code: 3, not 0.
    #[test]
    fn a_controller_that_does_not_respond_fails_the_check() {
        let report = |responding| Report {
            info: ClusterInfo {
                cluster_name: "local".into(),
                release: "24.11.5".into(),
                data_parser: "data_parser/v0.0.42".into(),
                api_version: "v0.0.42".into(),
                controller_responding: responding,
                jobs_submitted: None,
                controller_time: None,
            },
            partitions: vec![],
            nodes: vec![],
        };
        assert_eq!(report(true).exit_code(), 0);
        assert!(report(true).render().contains("controller:  responding"));
        assert_eq!(report(false).exit_code(), EXIT_CONTROLLER_DOWN);
        assert!(
            report(false)
                .render()
                .contains("controller:  NOT responding")
        );
    }
}
