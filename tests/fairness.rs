//! Pipelining floods do not hold the worker: a client whose input is
//! always waiting yields between turns, so the others are heard while its
//! flood goes on.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use common::*;

/// Flooding clients.
const FLOODERS: usize = 2;
/// Commands in one write of a flood, and the writes a flood makes at most.
const CHUNK: usize = 40_000;
const CHUNKS: usize = 12;
/// Replies each flooder has received before B asks.
const UNDER_WAY: usize = 4 * CHUNK;

/// Each flooder sends `INCR a` as fast as the server takes it (a writer
/// thread) and drains its replies (a reader thread), so its connection
/// finds its buffer's worth of input waiting at every read (see
/// [`widen_receive_buffers`]); two of them, served in turn, so that a
/// moment's lag of one writer does not leave the worker idle. B's `GET a`,
/// sent once the floods are under way, says how many of their commands
/// had run when B was answered.
///
/// One worker, as on a 2-core host, whose sockets are polled only when it
/// has nothing else to run: `event_interval` is set past the test's
/// length (the binary's 2,048 tasks bound the same starving at tens of
/// megabytes of floods; here that bound is out of the way, so the outcome
/// does not depend on where the floods fall in the worker's count). Before
/// the fix B was answered once the floods had run out (every command
/// sent); now a connection whose input was waiting yields to the sockets'
/// poll after its turn, and B is answered mid-flood whatever the pace of
/// the threads: the floods stop when B's answer arrives, or when they run
/// out (a failure).
#[test]
fn pipelining_floods_do_not_keep_another_client_unheard() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .event_interval(u32::MAX)
        .enable_all()
        .build()
        .expect("runtime");
    let srv = rt.block_on(Server::start());
    widen_receive_buffers(srv.addr);
    let connect = || {
        let s = TcpStream::connect(srv.addr).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_nodelay(true).unwrap();
        s
    };
    let mut b = connect();
    // B is connected and served, and waits on its socket like any idle
    // client.
    assert_eq!(call(&mut b, b"*1\r\n$4\r\nPING\r\n"), "+PONG\r\n");

    let stop = Arc::new(AtomicBool::new(false));
    let (under_way, flooding) = mpsc::channel();
    let floods: Vec<Flood> = (0..FLOODERS)
        .map(|_| Flood::start(connect(), &stop, under_way.clone()))
        .collect();
    for _ in 0..FLOODERS {
        flooding
            .recv_timeout(IO_TIMEOUT)
            .expect("every flood under way");
    }

    // The flooders' connections are running their floods: B asks while
    // they do.
    let reply = call(&mut b, b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n");
    stop.store(true, Ordering::Relaxed);
    let ran: usize = reply
        .lines()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("GET a answered {reply:?}"));
    let sent = FLOODERS * CHUNK * CHUNKS;
    assert!(
        ran < sent,
        "B was answered only after all {sent} of the floods' commands had run"
    );

    for flood in floods {
        flood.end();
    }
    rt.block_on(srv.shutdown());
}

/// One flooding client: its socket, writer and reader.
struct Flood {
    socket: TcpStream,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Flood {
    fn start(socket: TcpStream, stop: &Arc<AtomicBool>, under_way: mpsc::Sender<()>) -> Flood {
        let chunk = b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n".repeat(CHUNK);
        let writer = {
            let mut socket = socket.try_clone().unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                for _ in 0..CHUNKS {
                    if stop.load(Ordering::Relaxed) || socket.write_all(&chunk).is_err() {
                        break;
                    }
                }
            })
        };
        // The first writes of a new connection reach the server in bursts,
        // while the kernel's buffers for it grow: under way means past
        // them.
        let reader = {
            let mut socket = socket.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let (mut replies, mut under_way) = (0, Some(under_way));
                while let Ok(n) = socket.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    replies += buf[..n].iter().filter(|&&c| c == b'\n').count();
                    if replies >= UNDER_WAY {
                        if let Some(under_way) = under_way.take() {
                            let _ = under_way.send(());
                        }
                    }
                }
            })
        };
        Flood {
            socket,
            writer,
            reader,
        }
    }

    fn end(self) {
        self.writer.join().unwrap();
        self.socket.shutdown(Shutdown::Both).unwrap();
        self.reader.join().unwrap();
    }
}

/// Gives the server's listener, and so every connection it accepts, the
/// receive buffer a fast client's connection grows to by the kernel's
/// autotuning (which follows how fast the server reads, slow in a debug
/// build): a flood then keeps megabytes waiting in its socket, and each of
/// the server's reads fills its buffer. With a small buffer a read now and
/// then takes what is left, a socket found empty next sends its task to
/// wait on the sockets' poll, and the test would pass before the fix.
fn widen_receive_buffers(addr: std::net::SocketAddr) {
    use std::os::fd::BorrowedFd;
    let mut widened = 0;
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(fd) = entry.unwrap().file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: the descriptor is open (listed just now, and nothing
        // closes descriptors here before a client connects); it is only
        // borrowed for this call.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let Ok(local) = sock.local_addr() else {
            continue;
        };
        if local.as_socket() == Some(addr) {
            sock.set_recv_buffer_size(4 << 20).expect("SO_RCVBUF");
            widened += 1;
        }
    }
    assert_eq!(widened, 1, "the listener found among the descriptors");
}

/// Writes one request and reads its one-line or bulk reply.
fn call(s: &mut TcpStream, request: &[u8]) -> String {
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        s.read_exact(&mut byte).expect("a reply within IO_TIMEOUT");
        got.push(byte[0]);
        let text = String::from_utf8_lossy(&got);
        let complete = match got[0] {
            b'$' => text.matches("\r\n").count() == 2 || text == "$-1\r\n",
            _ => text.ends_with("\r\n"),
        };
        if complete {
            return text.into_owned();
        }
    }
}
