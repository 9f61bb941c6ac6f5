//! Rebuild when a migration changes (`sqlx::migrate!` embeds them). Which tests run is decided
//! when they run (`ninetrix-testkit`), never here.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
