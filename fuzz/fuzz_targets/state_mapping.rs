//! Slurm state words and job records through the state mappings and the SlurmJob phase/status.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slurm_operator_fuzz::state_mapping(data));
