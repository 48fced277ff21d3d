use std::process::ExitCode;
use std::sync::Arc;

use turnstile::config::{Cli, Command};
use turnstile::SystemClock;

#[global_allocator]
static ALLOC: turnstile::alloc::CountingAlloc = turnstile::alloc::CountingAlloc;

/// Threads the runtime may run blocking waits on (tokio's default, made
/// explicit: it is a limit users rely on).
const MAX_BLOCKING_THREADS: usize = 512;

/// Tasks a worker polls before it polls the sockets again (tokio's
/// default is 61). With many connections ready at once a worker's local
/// queue (256 tasks) overflows into the shared one, and those wait there
/// while connections woken by the next poll of the sockets go ahead of
/// them: with one worker and 1,000 connections the p99 was 150-167 ms at
/// 61 and 30-45 ms at 512 to 2,048 (`docs/performance.md`, "Fixed: the
/// sockets are polled once a round"). At 2,048 a round of 1,000 ready connections (two
/// polls each: the batch, then its write behind the others) is served
/// before the next events are read, as Redis's event loop serves them.
const EVENT_INTERVAL: u32 = 2048;

fn main() -> ExitCode {
    let cli = match Cli::parse_full(std::env::args_os()) {
        Ok(cli) => cli,
        Err(turnstile::config::ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("turnstile: {e}");
            return ExitCode::from(2);
        }
    };
    turnstile::alloc::installed();
    turnstile::alloc::one_arena();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // The bound on threads waiting off the async workers: clients waiting
    // for the shard of a script that runs long (`store::Blocking`), and
    // `SAVE`. Past it a waiter's worker is handed over only as one frees;
    // 1,000 clients waiting on one script peaked at 516 threads and were
    // all answered when it ended (`docs/reliability.md`).
    builder.max_blocking_threads(MAX_BLOCKING_THREADS);
    builder.worker_threads(cli.config.worker_threads());
    builder.event_interval(EVENT_INTERVAL);
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("turnstile: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match cli.command {
        Some(Command::Healthcheck { host, port }) => runtime.block_on(healthcheck(&host, port)),
        None => runtime.block_on(serve(cli.config)),
    };
    // A worker still inside a script that shutdown gave up on never
    // returns: the process ends without waiting for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

async fn serve(config: turnstile::Config) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal (and never with NO_COLOR): log files and
    // scripts that read "turnstile listening local=..." get plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    use tracing_subscriber::util::SubscriberInitExt;
    turnstile::logging::subscriber(&config.log_format, filter, ansi, std::io::stdout).init();
    let mut config = config;
    config.maxclients = turnstile::server::fit_maxclients(&config);
    // Signals are taken over before the server listens: a SIGTERM (or
    // SIGHUP) just after "listening" would otherwise still have its default
    // action and kill the process with no final snapshot.
    let mut signals = Signals::install();
    let server = match turnstile::start(&config, Arc::new(SystemClock::new())).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    signals.reload_on_hangup(server.state().clone());
    // A client's SHUTDOWN stops the server as a signal does. After one, the
    // next signal is taken as the first (a Kubernetes preStop hook runs
    // `redis-cli shutdown`, then SIGTERM follows at once): only a second
    // exits without waiting.
    let by_command = tokio::select! {
        _ = signals.next() => false,
        _ = server.shutdown_requested() => true,
    };
    signals.exit_on_another(by_command);
    tracing::info!("shutting down: no new connections, finishing replies in flight");
    match server.shutdown().await {
        Ok(()) => {
            tracing::info!("bye");
            ExitCode::SUCCESS
        }
        // Logged where it failed; the exit status says it too.
        Err(_) => ExitCode::FAILURE,
    }
}

/// SIGINT and SIGTERM stop the server. SIGHUP (what `systemctl reload`
/// and `kill -HUP` send) reloads the policy files with `--policies`, and
/// is otherwise logged and ignored, as Redis ignores it; SIGALRM likewise:
/// their default action would kill the process with no final snapshot.
/// Once shutting down, a second SIGINT or SIGTERM exits at once (the
/// first after a client's `SHUTDOWN` does not).
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Registers every handler now (registering replaces the default
    /// action for the process's life).
    fn install() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        for (name, kind) in [("SIGALRM", SignalKind::alarm())] {
            if let Ok(mut sig) = signal(kind) {
                tokio::spawn(async move {
                    while sig.recv().await.is_some() {
                        tracing::warn!(
                            "{name} received and ignored (SIGTERM or SIGINT stops the server)"
                        );
                    }
                });
            }
        }
        Signals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
            hup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// From now on, SIGHUP reloads the policies (one received before
    /// the server started is delivered now).
    fn reload_on_hangup(&mut self, state: Arc<turnstile::state::State>) {
        let Some(mut hup) = self.hup.take() else {
            return;
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                if state.policies.path().is_none() {
                    tracing::warn!("SIGHUP received and ignored: no --policies to reload (SIGTERM or SIGINT stops the server)");
                    continue;
                }
                // The outcome is logged by the reload itself.
                let _ = state.reload_policies();
            }
        });
    }

    /// Once the server is stopping, arms the next SIGINT or SIGTERM to
    /// exit at once; with `spare_one` (the stop came from `SHUTDOWN`), the
    /// one after it.
    fn exit_on_another(mut self, spare_one: bool) {
        tokio::spawn(async move {
            if spare_one {
                self.next().await;
                tracing::warn!(
                    "stop signal received: already shutting down (SHUTDOWN); another exits at once"
                );
            }
            self.next().await;
            tracing::warn!(
                "second stop signal: exiting now, without waiting for clients or a final snapshot"
            );
            std::process::exit(1);
        });
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = recv(&mut self.term) => {}
            _ = recv(&mut self.int) => {}
        }
    }
}

/// The next delivery of a signal, or never if it could not be registered.
async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

async fn healthcheck(host: &str, port: u16) -> ExitCode {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        s.write_all(b"*1\r\n$4\r\nPING\r\n")
            .await
            .map_err(|e| format!("cannot send PING to {host}:{port}: {e}"))?;
        let mut reply = [0u8; 256];
        let n = s
            .read(&mut reply)
            .await
            .map_err(|e| format!("no reply from {host}:{port}: {e}"))?;
        let reply = &reply[..n];
        // NOAUTH: up and answering, only a password is set.
        if reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH") {
            return Ok(());
        }
        let text = String::from_utf8_lossy(reply);
        Err(match text.trim_end() {
            "" => format!("{host}:{port} closed the connection without answering PING"),
            t => format!("{host}:{port} answered PING with {t:?}"),
        })
    };
    let why = match tokio::time::timeout(std::time::Duration::from_secs(3), attempt).await {
        Ok(Ok(())) => return ExitCode::SUCCESS,
        Ok(Err(why)) => why,
        Err(_) => format!("{host}:{port} did not answer PING within 3 s"),
    };
    eprintln!("turnstile healthcheck: {why}");
    ExitCode::FAILURE
}
