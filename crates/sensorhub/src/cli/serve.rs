//! `sensorhub serve`: run the HTTP API. The settings are resolved by
//! [`ServeSettings::resolve`] and the service is started by
//! [`crate::service::launch`]; this file opens the database, writes the
//! demo when asked, binds and waits for the end.

use super::{CliResult, Context};
use crate::config::serve::{ServeArgs, ServeSettings};
use crate::http::shutdown_signal;

/// Runs the server until SIGTERM or Ctrl-C.
pub async fn run(ctx: &Context, args: ServeArgs) -> CliResult {
    let settings = ServeSettings::resolve(&ctx.database, &args, &ctx.file)?;
    let store = ctx.open().await?;
    if settings.demo {
        super::demo::fill(&store, &settings.listen.to_string(), settings.dashboard.is_some()).await?;
    }
    // Signal handlers first: a SIGTERM right after the start is then a clean stop.
    let shutdown = shutdown_signal();
    let listen = settings.listen;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let service = crate::service::launch(settings, store, listener, shutdown).await?;
    service.serving.await??;
    tracing::info!("stopped");
    Ok(())
}
