//! The `gearlb` binary: everything lives in the library; see [`gearlb::cli`].

/// mimalloc (see Cargo.toml); the library's own tests use the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Purge the calling thread's freed mimalloc pages now rather than at its next
/// allocation (see `gearlb::memory`).
fn release_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only walks the calling thread's heap
    // (and the abandoned segments) and may be called at any time from any thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() {
    std::process::exit(gearlb::cli::main(Some(release_memory)));
}
