//! What both images need from a bare-metal runtime: an allocator that refuses, and the exit.

use cortex_m_semihosting::debug;

/// Ends the run through semihosting with a success or failure status.
pub fn exit(success: bool) -> ! {
    debug::exit(if success {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    loop {
        cortex_m::asm::wfi();
    }
}

/// Refuses every request. The SDK allocates nothing; aes-gcm (under hpke) enables its
/// `alloc` feature by default, which links the `alloc` crate and so requires an allocator to
/// exist. Any allocation would fail the run through the panic handler.
struct NoAllocator;

// SAFETY: `alloc` returns null, which GlobalAlloc allows to signal failure; `dealloc` is never
// reached because no allocation ever succeeds.
unsafe impl core::alloc::GlobalAlloc for NoAllocator {
    unsafe fn alloc(&self, _: core::alloc::Layout) -> *mut u8 {
        core::ptr::null_mut()
    }

    unsafe fn dealloc(&self, _: *mut u8, _: core::alloc::Layout) {}
}

#[global_allocator]
static ALLOCATOR: NoAllocator = NoAllocator;
