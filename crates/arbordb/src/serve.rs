//! `arbordb serve`: the MongoDB-compatible server, with mongod's flags for
//! what we support (`--dbpath`, `--port`, `--bind_ip`, `--logpath`) plus our
//! storage options. Logs are JSON lines on stderr or in `--logpath`.

use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use storage::{Compressor, Config, Engine, SyncMode};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Data directory, created if missing [default: arbordb-data].
    #[arg(long)]
    dbpath: Option<PathBuf>,
    /// [default: 27017]
    #[arg(long)]
    port: Option<u16>,
    /// Comma-separated addresses to listen on [default: 127.0.0.1].
    #[arg(long = "bind_ip", value_delimiter = ',')]
    bind_ip: Option<Vec<IpAddr>>,
    /// Write the log here instead of stderr.
    #[arg(long)]
    logpath: Option<PathBuf>,
    /// Cache size in MiB (default: the engine's, 512).
    #[arg(long)]
    cache_mib: Option<usize>,
    /// Journal sync: fsync (each acknowledged commit is durable), background
    /// (fsync every 100 ms), off (at checkpoints only) [default: fsync].
    #[arg(long)]
    journal_sync: Option<SyncMode>,
    /// How new collections and indexes store their leaf pages on disk:
    /// none, snappy or zstd (as mongod's
    /// `--wiredTigerCollectionBlockCompressor`) [default: snappy].
    #[arg(long)]
    block_compressor: Option<Compressor>,
    /// Release free blocks of a data file to the device (punch holes) each
    /// time checkpoints have freed this many; 0: never [default: 20000].
    #[arg(long)]
    punch_every_blocks: Option<u64>,
    /// Read and write data files with direct I/O (O_DIRECT), bypassing the
    /// operating system's page cache: the server's cache is then the only
    /// one (for benchmarks that measure its misses). `--direct-io=false`
    /// overrides a config file [default: false].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    direct_io: Option<bool>,
    /// A write-optimized index's memtable becomes a run past this many KiB
    /// of memory, or past 12% of the cache, whichever is less
    /// [default: 65536].
    #[arg(long)]
    memtable_kib: Option<usize>,
    /// A YAML file in mongod.conf's shape: net.port, net.bindIp,
    /// storage.dbPath, systemLog.path (with destination: file), and ours,
    /// storage.arbordb.cacheSizeMiB, .journalSync, .blockCompressor,
    /// .punchEveryBlocks, .directIO and .memtableKiB.
    /// Flags given on the command line win.
    #[arg(long, short = 'f')]
    config: Option<PathBuf>,
    /// A server parameter at start-up, as mongod's (repeatable). Known:
    /// enableTestCommands=1 (the test command configureFailPoint).
    #[arg(long = "setParameter", value_name = "NAME=VALUE")]
    set_parameter: Vec<String>,
}

/// `--setParameter` values: whether test commands are on.
fn test_commands(settings: &[String]) -> Result<bool, String> {
    let mut on = false;
    for s in settings {
        let (name, value) = s.split_once('=').ok_or_else(|| format!("--setParameter takes NAME=VALUE, not {s:?}"))?;
        match (name, value) {
            ("enableTestCommands", "1" | "true") => on = true,
            ("enableTestCommands", "0" | "false") => on = false,
            ("enableTestCommands", other) => return Err(format!("Bad value for enableTestCommands: {other:?}")),
            _ => return Err(format!("Illegal --setParameter parameter: \"{name}\"")),
        }
    }
    Ok(on)
}

/// Options from `--config`, each `None` when the file does not set it.
#[derive(Debug, Default, PartialEq)]
struct FileOptions {
    dbpath: Option<PathBuf>,
    port: Option<u16>,
    bind_ip: Option<Vec<IpAddr>>,
    logpath: Option<PathBuf>,
    cache_mib: Option<usize>,
    journal_sync: Option<SyncMode>,
    block_compressor: Option<Compressor>,
    punch_every_blocks: Option<u64>,
    direct_io: Option<bool>,
    memtable_kib: Option<usize>,
}

/// Parse a mongod.conf-shaped YAML text; unknown options are errors, as
/// in mongod.
fn parse_config(text: &str) -> Result<FileOptions, String> {
    use yaml_rust2::{Yaml, YamlLoader};
    let docs = YamlLoader::load_from_str(text).map_err(|e| format!("config file: {e}"))?;
    let mut flat = Vec::new();
    fn walk(prefix: &str, y: &Yaml, out: &mut Vec<(String, Yaml)>) {
        match y {
            Yaml::Hash(h) => {
                for (k, v) in h {
                    let key = match k.as_str() {
                        Some(k) if prefix.is_empty() => k.to_string(),
                        Some(k) => format!("{prefix}.{k}"),
                        None => format!("{prefix}.?"),
                    };
                    walk(&key, v, out);
                }
            }
            other => out.push((prefix.to_string(), other.clone())),
        }
    }
    for d in &docs {
        walk("", d, &mut flat);
    }
    let mut o = FileOptions::default();
    let mut log_to_file = None;
    for (key, v) in flat {
        let text = || match &v {
            Yaml::String(s) => Ok(s.clone()),
            Yaml::Integer(i) => Ok(i.to_string()),
            Yaml::Real(r) => Ok(r.clone()),
            Yaml::Boolean(b) => Ok(b.to_string()),
            _ => Err(format!("config file: {key} must be a scalar")),
        };
        let bad = |e: &dyn std::fmt::Display| format!("config file: bad value for {key}: {e}");
        match key.as_str() {
            "" => {}
            "net.port" => o.port = Some(text()?.parse().map_err(|e| bad(&e))?),
            "net.bindIp" => {
                let ips: Result<Vec<IpAddr>, _> = text()?.split(',').map(|s| s.trim().parse()).collect();
                o.bind_ip = Some(ips.map_err(|e| bad(&e))?);
            }
            "storage.dbPath" => o.dbpath = Some(PathBuf::from(text()?)),
            "storage.arbordb.cacheSizeMiB" => o.cache_mib = Some(text()?.parse().map_err(|e| bad(&e))?),
            "storage.arbordb.journalSync" => o.journal_sync = Some(text()?.parse().map_err(|e: String| bad(&e))?),
            // mongod's own name for it, so a copied mongod.conf works.
            "storage.arbordb.blockCompressor" | "storage.wiredTiger.collectionConfig.blockCompressor" => {
                o.block_compressor = Some(text()?.parse().map_err(|e: String| bad(&e))?)
            }
            "storage.arbordb.punchEveryBlocks" => o.punch_every_blocks = Some(text()?.parse().map_err(|e| bad(&e))?),
            "storage.arbordb.directIO" => o.direct_io = Some(text()?.parse().map_err(|e| bad(&e))?),
            "storage.arbordb.memtableKiB" => o.memtable_kib = Some(text()?.parse().map_err(|e| bad(&e))?),
            "systemLog.path" => o.logpath = Some(PathBuf::from(text()?)),
            "systemLog.destination" => log_to_file = Some(text()? == "file"),
            other => return Err(format!("config file: Unrecognized option: {other}")),
        }
    }
    if log_to_file == Some(false) {
        o.logpath = None;
    }
    Ok(o)
}

pub fn run(a: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let file = match &a.config {
        Some(p) => parse_config(&std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?)?,
        None => FileOptions::default(),
    };
    let dbpath = a.dbpath.or(file.dbpath).unwrap_or_else(|| PathBuf::from("arbordb-data"));
    let port = a.port.or(file.port).unwrap_or(27017);
    let bind_ip = a.bind_ip.or(file.bind_ip).unwrap_or_else(|| vec![IpAddr::from([127, 0, 0, 1])]);
    init_logging(a.logpath.or(file.logpath).as_deref())?;
    std::fs::create_dir_all(&dbpath)?;
    let mut config =
        Config { sync_mode: a.journal_sync.or(file.journal_sync).unwrap_or_default(), ..Config::default() };
    if let Some(mib) = a.cache_mib.or(file.cache_mib) {
        config.cache_size_bytes = mib << 20;
    }
    if let Some(c) = a.block_compressor.or(file.block_compressor) {
        config.table_compressor = c;
    }
    if let Some(n) = a.punch_every_blocks.or(file.punch_every_blocks) {
        config.punch_every_blocks = n;
    }
    config.direct_io = a.direct_io.or(file.direct_io).unwrap_or(false);
    if let Some(kib) = a.memtable_kib.or(file.memtable_kib) {
        use storage::limits::{memtable_config_max_kib, memtable_config_min_kib};
        if !(memtable_config_min_kib..=memtable_config_max_kib).contains(&kib) {
            return Err(format!(
                "memtable KiB must be between {memtable_config_min_kib} and {memtable_config_max_kib} (4 GiB), not {kib}"
            )
            .into());
        }
        config.memtable_max_bytes = kib << 10;
    }
    let test_commands = test_commands(&a.set_parameter)?;
    let engine = Engine::open(&dbpath, config)?;
    let mut parsed = server::parsed_options(&bind_ip, port, &dbpath);
    if test_commands {
        parsed.insert("setParameter", bson::doc! { "enableTestCommands": "1" });
    }
    let options = server::ServerOptions {
        bind: bind_ip.clone(),
        port,
        dbpath: dbpath.clone(),
        argv: std::env::args().collect(),
        parsed,
        test_commands,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("arbordb-net").build()?;
    runtime.block_on(async move {
        let server = server::Server::bind(engine, options).await?;
        for addr in server.local_addrs() {
            tracing::info!(%addr, dbpath = %dbpath.display(), "waiting for connections");
        }
        server.run().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

fn init_logging(logpath: Option<&std::path::Path>) -> std::io::Result<()> {
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ARBORDB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_current_span(false);
    match logpath {
        Some(p) => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(p)?;
            builder.with_writer(std::sync::Mutex::new(file)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_parameter_knows_enable_test_commands_only() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(test_commands(&[]), Ok(false));
        assert_eq!(test_commands(&args(&["enableTestCommands=1"])), Ok(true));
        assert_eq!(test_commands(&args(&["enableTestCommands=true", "enableTestCommands=0"])), Ok(false));
        assert!(test_commands(&args(&["enableTestCommands=yes"])).is_err());
        assert!(test_commands(&args(&["enableTestCommands"])).is_err());
        assert_eq!(test_commands(&args(&["nope=1"])), Err("Illegal --setParameter parameter: \"nope\"".to_string()));
    }

    /// `ServeArgs` as the command line gives them.
    fn serve_args(args: &[&str]) -> ServeArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).unwrap().serve
    }

    #[test]
    fn direct_io_is_a_flag_with_an_optional_value() {
        assert_eq!(serve_args(&[]).direct_io, None);
        assert_eq!(serve_args(&["--direct-io", "--cache-mib", "4"]).direct_io, Some(true));
        assert_eq!(serve_args(&["--direct-io=false"]).direct_io, Some(false));
        assert_eq!(serve_args(&["--direct-io", "true"]).direct_io, Some(true));
    }

    #[test]
    fn a_mongod_conf_shaped_file_parses() {
        let o = parse_config(
            "net:\n  port: 28017\n  bindIp: 127.0.0.1,::1\nstorage:\n  dbPath: /tmp/x\n  arbordb:\n    \
             cacheSizeMiB: 64\n    journalSync: off\n    blockCompressor: zstd\n    punchEveryBlocks: 0\n    directIO: true\n    memtableKiB: 256\nsystemLog:\n  destination: file\n  path: /tmp/x.log\n",
        )
        .unwrap();
        assert_eq!(o.port, Some(28017));
        assert_eq!(o.bind_ip.as_ref().map(Vec::len), Some(2));
        assert_eq!(o.dbpath, Some(PathBuf::from("/tmp/x")));
        assert_eq!((o.cache_mib, o.journal_sync), (Some(64), Some(SyncMode::Off)));
        assert_eq!((o.block_compressor, o.punch_every_blocks), (Some(Compressor::Zstd), Some(0)));
        assert_eq!((o.direct_io, o.memtable_kib), (Some(true), Some(256)));
        assert_eq!(o.logpath, Some(PathBuf::from("/tmp/x.log")));
    }

    #[test]
    fn unknown_options_and_bad_values_are_errors() {
        assert!(parse_config("net:\n  portt: 1\n").unwrap_err().contains("Unrecognized option: net.portt"));
        assert!(parse_config("net:\n  port: 99999\n").unwrap_err().contains("bad value for net.port"));
        assert!(parse_config("net:\n  bindIp: nowhere\n").is_err());
        assert!(parse_config("net: [unclosed").is_err());
        let mongod = parse_config("storage:\n  wiredTiger:\n    collectionConfig:\n      blockCompressor: none\n");
        assert_eq!(mongod.unwrap().block_compressor, Some(Compressor::None));
        let bad = parse_config("storage:\n  arbordb:\n    blockCompressor: lz4\n").unwrap_err();
        assert!(bad.contains("unknown block compressor \"lz4\""), "{bad}");
        assert_eq!(parse_config("").unwrap(), FileOptions::default());
    }
}
