//! The `kurir` binary, driven as an operator would.
