//! What a bare-metal C program linking only this Rust library needs from it.

/// Halts: a panic in the SDK means misuse (a broken invariant), and firmware has no one to
/// report to here.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Refuses every request. The SDK allocates nothing; aes-gcm (under hpke) enables its `alloc`
/// feature by default, which links the `alloc` crate and so requires an allocator to exist.
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
