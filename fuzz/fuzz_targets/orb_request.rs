#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ocelli_node::fuzzing::orb_request(data));
