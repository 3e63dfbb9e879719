//! `sensorhub-floor`: the floor of the HTTP stack for a response. It answers
//! every GET with the same pre-rendered body on the same stack as sensorhub
//! (axum, hyper, tokio), doing no other work (scenario S4).
#![forbid(unsafe_code)]

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use clap::Parser;
use std::path::PathBuf;

/// Serve one body for every request.
#[derive(Parser)]
struct Args {
    /// Address to listen on
    #[arg(long)]
    listen: String,
    /// File whose bytes every answer carries
    #[arg(long)]
    body: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let body = axum::body::Bytes::from(std::fs::read(&args.body)?);
    let app = Router::new().fallback(move || {
        let body = body.clone();
        async move { ([(header::CONTENT_TYPE, "application/json")], body).into_response() }
    });
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
