//! Rebuild when a migration changes (`sqlx::migrate!` embeds them), and compile the Postgres
//! half of the test suite as runnable only when `NINETRIX_TEST_POSTGRES_URL` is set, so test
//! runners report it as skipped otherwise instead of passing it silently.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=NINETRIX_TEST_POSTGRES_URL");
    println!("cargo::rustc-check-cfg=cfg(ninetrix_postgres_tests)");
    if std::env::var("NINETRIX_TEST_POSTGRES_URL").is_ok_and(|url| !url.is_empty()) {
        println!("cargo:rustc-cfg=ninetrix_postgres_tests");
    }
}
