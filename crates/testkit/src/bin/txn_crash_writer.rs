//! Child process of the transaction kill -9 test: four threads run bank
//! transfers (see `testkit::bank`) as concurrent transactions, each printing
//! `ack THREAD SEQ` once its commit returned (fsync on commit). The parent
//! kills the process at a random moment.

use std::io::Write;
use std::sync::{Arc, Mutex};
use storage::Engine;
use testkit::bank::Bank;

const THREADS: u32 = 4;

fn main() {
    testkit::crash::abort_on_panic();
    let dir = std::env::args().nth(1).expect("data directory");
    let config = testkit::crash::writer_config();
    let engine = Engine::open(dir, config).expect("open");
    let bank = Arc::new(Bank::open(&engine).expect("bank"));
    let out = Arc::new(Mutex::new(std::io::stdout()));
    writeln!(out.lock().unwrap(), "ready").unwrap();
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (engine, bank, out) = (engine.clone(), bank.clone(), out.clone());
            std::thread::spawn(move || {
                let start = bank.next_seq(&engine, thread).expect("next seq");
                for seq in start.. {
                    bank.transfer(&engine, thread, seq).expect("transfer");
                    let mut o = out.lock().unwrap();
                    writeln!(o, "ack {thread} {seq}").unwrap();
                    o.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
