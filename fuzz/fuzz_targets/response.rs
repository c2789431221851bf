//! A slurmrestd answer (header byte + body) decoded and converted as the facade does.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slurm_operator_fuzz::response(data));
