//! `sqlx::migrate!` embeds the migrations at compile time; without this, cargo does not know
//! to rebuild the crate when a migration file is added or changed.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
