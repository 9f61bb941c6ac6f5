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
    // The OpenAPI contract test runs schemathesis: runnable when it is installed, or when CI
    // requires it (then its absence fails the test instead of skipping it).
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=NINETRIX_SCHEMATHESIS");
    println!("cargo:rerun-if-env-changed=NINETRIX_REQUIRE_SCHEMATHESIS");
    println!("cargo::rustc-check-cfg=cfg(ninetrix_schemathesis)");
    let program = std::env::var("NINETRIX_SCHEMATHESIS").unwrap_or_else(|_| "schemathesis".into());
    let installed = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let required = std::env::var("NINETRIX_REQUIRE_SCHEMATHESIS").as_deref() == Ok("1");
    if installed || required {
        println!("cargo:rustc-cfg=ninetrix_schemathesis");
    }
}
