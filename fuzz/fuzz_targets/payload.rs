#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sdk_orb::fuzzing::payload(data));
