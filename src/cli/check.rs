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

impl Report {
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
