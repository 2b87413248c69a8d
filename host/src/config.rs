//! The broker's configuration: a TOML file, environment overrides, and the
//! development defaults used when no file is given.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use serde::Deserialize;

use crate::secret::Secret;

/// Default listen address (API.md).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// Default database (API.md).
pub const DEFAULT_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/lockbroker";

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// What the parser said and on which line, without the line itself:
    /// it may hold a secret.
    #[error("invalid config: {message}{}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Parse {
        message: String,
        line: Option<usize>,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
}

/// One database: a server URL, or a list of servers holding the same data
/// (a Galera cluster's nodes, a primary and its standbys), in failover
/// order. In TOML a string or an array of strings; in
/// `LOCKBROKER_DATABASE_URL`, comma-separated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(from = "OneOrMany")]
pub struct DatabaseUrl(pub Vec<String>);

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl From<OneOrMany> for DatabaseUrl {
    fn from(value: OneOrMany) -> Self {
        match value {
            OneOrMany::One(url) => DatabaseUrl::parse_list(&url),
            OneOrMany::Many(urls) => DatabaseUrl(urls),
        }
    }
}

impl From<String> for DatabaseUrl {
    fn from(url: String) -> Self {
        DatabaseUrl(vec![url])
    }
}

impl DatabaseUrl {
    /// A comma-separated list (commas never occur in a MySQL URL's host
    /// part; a password with a comma must be percent-encoded).
    pub fn parse_list(text: &str) -> DatabaseUrl {
        DatabaseUrl(
            text.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// The whole configuration, after defaults and environment overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The base URL (`http://host:port`) at which the other brokers on the
    /// same database reach this one, for push wake-ups. `None`: derived
    /// from the bound address ([`Config::advertise_url_for`]).
    #[serde(default)]
    pub advertise_url: Option<String>,
    #[serde(default = "default_database_url")]
    pub database_url: DatabaseUrl,
    /// Bound on the database work of one operation (every statement and
    /// commit of it), in milliseconds: past it, 503.
    #[serde(default = "default_db_timeout_ms")]
    pub db_timeout_ms: u64,
    /// Group commit: uncontended lock acquires and releases of many clients
    /// share transactions (on by default; off, each has its own).
    #[serde(default = "default_group_commit")]
    pub group_commit: bool,
    /// Bearer token for `/v1/admin` (or its `sha256:` digest). Without
    /// one, the admin API answers 401.
    #[serde(default)]
    pub admin_token: Option<Secret>,
    /// Directory of policy components, watched for changes.
    #[serde(default = "default_policy_dir")]
    pub policy_dir: PathBuf,
    /// MySQL connections the broker may open. Held locks pin none of them.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Time budget of one policy call, in milliseconds.
    #[serde(default = "default_policy_deadline_ms")]
    pub policy_deadline_ms: u64,
    /// Linear memory a policy instance may grow to, in bytes.
    #[serde(default = "default_policy_memory_bytes")]
    pub policy_memory_bytes: usize,
    /// Largest policy component accepted by `PUT /v1/admin/tenants/{t}/policy`
    /// (64 MiB: a componentize-py component is about 18 MB, a
    /// componentize-js one about 12 MB).
    #[serde(default = "default_max_policy_bytes")]
    pub max_policy_bytes: usize,
    /// How often the reaper looks for expired leases with waiters, in ms.
    #[serde(default = "default_reaper_interval_ms")]
    pub reaper_interval_ms: u64,
    /// How long lock history events are kept, in hours; older ones are
    /// deleted by the reaper in bounded batches.
    #[serde(default = "default_history_retention_hours")]
    pub history_retention_hours: u64,
    /// Where compiled policy components are cached, keyed by sha256 and
    /// wasmtime build. Default `$XDG_CACHE_HOME/lockbroker` or
    /// `~/.cache/lockbroker`; none if neither is known.
    #[serde(default = "default_cache_dir")]
    pub cache_dir: Option<PathBuf>,
    /// Time a client has to send its request headers, in milliseconds.
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// Bearer token `GET /metrics` requires when set (its label values
    /// name tenants), or its `sha256:` digest; without one, `/metrics` is
    /// open.
    #[serde(default)]
    pub metrics_token: Option<Secret>,
    /// How log lines are written: `text` (the default) or `json`.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Where spans are exported: the base URL of an OTLP/HTTP receiver
    /// (`http://collector:4318`; spans go to its `/v1/traces`). `None`:
    /// no tracing at all (the default).
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans.
    #[serde(default = "default_otlp_service_name")]
    pub otlp_service_name: String,
    /// HTTPS: without it, plain HTTP (development only).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
    /// True when the built-in development defaults are in use.
    #[serde(skip)]
    pub dev_defaults: bool,
    /// The file this config was read from: what a reload reads again
    /// (none: the development defaults, or a config built in code).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// How the broker writes its log lines (`--log-format`, `log_format`,
/// `LOCKBROKER_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<LogFormat, ConfigError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(ConfigError::Invalid(format!(
                "log format {other:?} is neither \"text\" nor \"json\""
            ))),
        }
    }
}

/// `[tls]`: the listener's certificate and key (PEM; the certificate file
/// may hold the chain), re-read when they change or on SIGHUP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Set: mutual TLS; a client must present a certificate signed by this
    /// CA, or the handshake is refused.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// What this broker trusts when it pushes wake-ups to another broker's
    /// `https://` advertise_url (default: the system's roots).
    #[serde(default)]
    pub peer_ca_file: Option<PathBuf>,
}

/// The longest `lock_delay_ms` or `min_hold_ms` (one day).
pub const MAX_DELAY_MS: u64 = 86_400_000;
/// The longest `history_retention_hours` (about ten years).
pub const MAX_HISTORY_RETENTION_HOURS: u64 = 87_600;

/// One `[[tenant]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// One key (`api_key = "..."`), kept for configs written before
    /// `api_keys`; both may be given and all their keys work.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// The tenant's keys, each a secret or its `sha256:` digest: several
    /// so that a key is rotated without downtime.
    #[serde(default)]
    pub api_keys: Vec<Secret>,
    /// A file in `policy_dir`; `None` is the built-in default policy.
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default = "default_max_ttl_ms")]
    pub max_ttl_ms: u64,
    #[serde(default = "default_max_waiters")]
    pub max_waiters: u64,
    /// Live leases of the tenant, all kinds together; an acquire that
    /// would pass it answers 429 `quota_exceeded`.
    #[serde(default = "default_max_held")]
    pub max_held: u64,
    /// Requests per second on one broker (a token bucket); `None`:
    /// unlimited. Past it, 429 `rate_limited`.
    #[serde(default)]
    pub max_requests_per_s: Option<u32>,
    /// The bucket's size; `None`: twice `max_requests_per_s`.
    #[serde(default)]
    pub max_requests_burst: Option<u32>,
    /// Event streams (`GET /v1/events`) the tenant may have open on one
    /// broker at once.
    #[serde(default = "default_max_streams")]
    pub max_streams: usize,
    /// Live sessions of the tenant (`POST /v1/sessions`), counted in the
    /// database when one opens; past it, 429 `quota_exceeded`.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u64,
    /// This tenant's own database (a shard); `None`: the top-level one.
    #[serde(default)]
    pub database_url: Option<DatabaseUrl>,
    /// This tenant's policy call budget in ms; `None`: `policy_deadline_ms`.
    /// A componentize-py or -js policy needs about 20 to 50: the first call
    /// on a fresh instance includes instantiating it (10 to 40 ms measured).
    #[serde(default)]
    pub policy_deadline_ms: Option<u64>,
    /// This tenant's policy memory limit in bytes; `None`:
    /// `policy_memory_bytes` (a trivial componentize-py policy ran in 16 MiB).
    #[serde(default)]
    pub policy_memory_bytes: Option<usize>,
    /// After a lease of this tenant *expires*, its key is not granted again
    /// for this long, in ms (0: at once). A clean release does not delay.
    #[serde(default)]
    pub lock_delay_ms: u64,
    /// A released lock stays unavailable until this long after its grant,
    /// in ms (0: none), for jobs that must not run twice in one period.
    #[serde(default)]
    pub min_hold_ms: u64,
}

impl TenantConfig {
    /// A tenant with this name and API key, the built-in policy and the
    /// default limits.
    ///
    /// # Panics
    /// `api_key` is empty or a malformed digest.
    pub fn new(name: &str, api_key: &str) -> TenantConfig {
        TenantConfig {
            name: name.to_owned(),
            api_key: Some(Secret::try_from(api_key).expect("a valid API key")),
            api_keys: Vec::new(),
            policy: None,
            max_ttl_ms: default_max_ttl_ms(),
            max_waiters: default_max_waiters(),
            max_held: default_max_held(),
            max_requests_per_s: None,
            max_requests_burst: None,
            max_streams: default_max_streams(),
            max_sessions: default_max_sessions(),
            database_url: None,
            policy_deadline_ms: None,
            policy_memory_bytes: None,
            lock_delay_ms: 0,
            min_hold_ms: 0,
        }
    }
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("valid default address")
}
fn default_database_url() -> DatabaseUrl {
    DatabaseUrl::from(DEFAULT_DATABASE_URL.to_owned())
}
fn default_db_timeout_ms() -> u64 {
    2000
}
fn default_group_commit() -> bool {
    true
}
fn default_policy_dir() -> PathBuf {
    PathBuf::from("plugins/dist")
}
fn default_max_connections() -> u32 {
    32
}
fn default_policy_deadline_ms() -> u64 {
    5
}
fn default_policy_memory_bytes() -> usize {
    16 << 20
}
fn default_max_policy_bytes() -> usize {
    64 << 20
}
fn default_reaper_interval_ms() -> u64 {
    25
}
fn default_history_retention_hours() -> u64 {
    168
}
fn default_header_read_timeout_ms() -> u64 {
    10_000
}
fn default_otlp_service_name() -> String {
    "lockbroker".into()
}
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("lockbroker"))
}
fn default_max_ttl_ms() -> u64 {
    3_600_000
}
fn default_max_waiters() -> u64 {
    10_000
}
fn default_max_streams() -> usize {
    16
}
fn default_max_held() -> u64 {
    1_000_000
}
fn default_max_sessions() -> u64 {
    100_000
}

impl TenantConfig {
    /// Every key of the tenant (`api_key` and `api_keys`).
    pub fn keys(&self) -> impl Iterator<Item = &Secret> {
        self.api_key.iter().chain(&self.api_keys)
    }

    /// The token bucket's rate and size, when the tenant is rate limited.
    pub fn rate(&self) -> Option<(u32, u32)> {
        let rate = self.max_requests_per_s?;
        Some((
            rate,
            self.max_requests_burst.unwrap_or(rate.saturating_mul(2)),
        ))
    }
}

/// `text` as a secret for the setting `what`.
fn secret(what: &str, text: String) -> Result<Secret, ConfigError> {
    Secret::try_from(text).map_err(|why| ConfigError::Invalid(format!("{what} {why}")))
}

impl Config {
    /// Reads `path` (or the dev defaults when `None`) and applies the
    /// `LOCKBROKER_*` environment overrides.
    ///
    /// # Errors
    /// The file cannot be read or parsed, or a value is out of range.
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Config {
                    source: Some(path.to_owned()),
                    ..Config::from_toml(&text)?
                }
            }
            None => Config::dev(),
        };
        config.apply_env(|name| std::env::var(name).ok())?;
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text without environment overrides.
    ///
    /// # Errors
    /// The text is not valid TOML or does not match the schema.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::Parse {
            message: err.message().trim_end().to_owned(),
            line: err
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1),
        })
    }

    /// The development defaults: one tenant `default` with key `dev-key`,
    /// admin token `dev-admin`, the built-in policy.
    pub fn dev() -> Config {
        let mut config = Config::from_toml(
            r#"
admin_token = "dev-admin"
[[tenant]]
name = "default"
api_key = "dev-key"
"#,
        )
        .expect("dev config parses");
        config.dev_defaults = true;
        config
    }

    /// Applies `LOCKBROKER_LISTEN`, `LOCKBROKER_ADVERTISE_URL`,
    /// `LOCKBROKER_DATABASE_URL`, `LOCKBROKER_ADMIN_TOKEN`,
    /// `LOCKBROKER_POLICY_DIR`, `LOCKBROKER_CACHE_DIR`,
    /// `LOCKBROKER_METRICS_TOKEN`, `LOCKBROKER_LOG_FORMAT`,
    /// `LOCKBROKER_OTLP_ENDPOINT` (empty: none) and
    /// `LOCKBROKER_OTLP_SERVICE_NAME`.
    ///
    /// # Errors
    /// `LOCKBROKER_LISTEN` is not a socket address, or
    /// `LOCKBROKER_LOG_FORMAT` neither `text` nor `json`.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(listen) = var("LOCKBROKER_LISTEN") {
            self.listen = listen.parse().map_err(|_| {
                ConfigError::Invalid(format!("LOCKBROKER_LISTEN {listen:?} is not an address"))
            })?;
        }
        if let Some(url) = var("LOCKBROKER_ADVERTISE_URL") {
            self.advertise_url = Some(url);
        }
        if let Some(url) = var("LOCKBROKER_DATABASE_URL") {
            self.database_url = DatabaseUrl::parse_list(&url);
        }
        if let Some(token) = var("LOCKBROKER_ADMIN_TOKEN") {
            self.admin_token = Some(secret("LOCKBROKER_ADMIN_TOKEN", token)?);
        }
        if let Some(dir) = var("LOCKBROKER_POLICY_DIR") {
            self.policy_dir = PathBuf::from(dir);
        }
        if let Some(dir) = var("LOCKBROKER_CACHE_DIR") {
            self.cache_dir = Some(PathBuf::from(dir));
        }
        if let Some(token) = var("LOCKBROKER_METRICS_TOKEN") {
            self.metrics_token = Some(secret("LOCKBROKER_METRICS_TOKEN", token)?);
        }
        if let Some(format) = var("LOCKBROKER_LOG_FORMAT") {
            self.log_format = format.parse()?;
        }
        if let Some(url) = var("LOCKBROKER_OTLP_ENDPOINT") {
            self.otlp_endpoint = Some(url).filter(|u| !u.trim().is_empty());
        }
        if let Some(name) = var("LOCKBROKER_OTLP_SERVICE_NAME") {
            self.otlp_service_name = name;
        }
        Ok(())
    }

    /// Checks names, keys and limits.
    ///
    /// # Errors
    /// The first problem found, in words.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |msg: String| Err(ConfigError::Invalid(msg));
        if self.tenants.is_empty() {
            return invalid("at least one [[tenant]] is needed".into());
        }
        if self.header_read_timeout_ms == 0 {
            return invalid("header_read_timeout_ms must be at least 1".into());
        }
        if self.max_connections == 0 {
            return invalid("max_connections must be at least 1".into());
        }
        if !(100..=60_000).contains(&self.db_timeout_ms) {
            return invalid("db_timeout_ms must be 100 to 60000".into());
        }
        if self.database_url.0.is_empty() {
            return invalid("database_url must name at least one server".into());
        }
        if let Some(url) = &self.advertise_url {
            let base = url.trim_end_matches('/');
            let rest = base
                .strip_prefix("http://")
                .or_else(|| base.strip_prefix("https://"));
            let ok = rest.is_some_and(|rest| {
                !rest.is_empty()
                    && !rest.contains(['/', '?', '#', '@'])
                    && base.parse::<hyper::Uri>().is_ok()
            });
            if !ok {
                return invalid(format!(
                    "advertise_url {url:?} must be http://host:port or https://host:port (no path)"
                ));
            }
        }
        if let Some(url) = &self.otlp_endpoint {
            if !otlp_endpoint_ok(url) {
                // Not repeated: it may hold a password.
                return invalid(
                    "otlp_endpoint must be http://host:port or https://host:port, \
                     optionally with a path (no user, query or fragment)"
                        .into(),
                );
            }
        }
        let name = &self.otlp_service_name;
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            return invalid("otlp_service_name must be 1 to 255 characters".into());
        }
        if let Some(why) = policy_deadline_problem(self.policy_deadline_ms) {
            return invalid(format!("policy_deadline_ms {why}"));
        }
        if let Some(why) = policy_memory_problem(self.policy_memory_bytes) {
            return invalid(format!("policy_memory_bytes {why}"));
        }
        if !(1..=MAX_HISTORY_RETENTION_HOURS).contains(&self.history_retention_hours) {
            return invalid(format!(
                "history_retention_hours must be 1 to {MAX_HISTORY_RETENTION_HOURS}"
            ));
        }
        for (i, tenant) in self.tenants.iter().enumerate() {
            let name = &tenant.name;
            let name_ok = (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !name_ok {
                return invalid(format!("tenant name {name:?} must match [a-z0-9-]{{1,64}}"));
            }
            if tenant.keys().next().is_none() {
                return invalid(format!("tenant {name}: needs api_key or api_keys"));
            }
            if tenant.max_held == 0 {
                return invalid(format!("tenant {name}: max_held must be at least 1"));
            }
            if tenant.max_requests_per_s == Some(0) || tenant.max_requests_burst == Some(0) {
                return invalid(format!(
                    "tenant {name}: max_requests_per_s and max_requests_burst must be at least 1"
                ));
            }
            if tenant.max_requests_burst.is_some() && tenant.max_requests_per_s.is_none() {
                return invalid(format!(
                    "tenant {name}: max_requests_burst needs max_requests_per_s"
                ));
            }
            if tenant.max_streams == 0 {
                return invalid(format!("tenant {name}: max_streams must be at least 1"));
            }
            if tenant.max_sessions == 0 {
                return invalid(format!("tenant {name}: max_sessions must be at least 1"));
            }
            if tenant.max_ttl_ms < 100 {
                return invalid(format!("tenant {name}: max_ttl_ms must be at least 100"));
            }
            for (field, ms) in [
                ("lock_delay_ms", tenant.lock_delay_ms),
                ("min_hold_ms", tenant.min_hold_ms),
            ] {
                if ms > MAX_DELAY_MS {
                    return invalid(format!(
                        "tenant {name}: {field} must be at most {MAX_DELAY_MS}"
                    ));
                }
            }
            if let Some(why) = tenant.policy_deadline_ms.and_then(policy_deadline_problem) {
                return invalid(format!("tenant {name}: policy_deadline_ms {why}"));
            }
            if let Some(why) = tenant.policy_memory_bytes.and_then(policy_memory_problem) {
                return invalid(format!("tenant {name}: policy_memory_bytes {why}"));
            }
            if tenant.database_url.as_ref().is_some_and(|u| u.0.is_empty()) {
                return invalid(format!(
                    "tenant {name}: database_url must name at least one server"
                ));
            }
            if let Some(policy) = &tenant.policy {
                if policy.is_empty() || policy.contains(['/', '\\']) || policy.starts_with('.') {
                    return invalid(format!(
                        "tenant {name}: policy must be a file name in policy_dir"
                    ));
                }
            }
            for other in &self.tenants[..i] {
                if other.name == tenant.name {
                    return invalid(format!("tenant {name} is defined twice"));
                }
                if other.keys().any(|key| tenant.keys().any(|k| k == key)) {
                    return invalid(format!(
                        "tenants {} and {name} share an API key",
                        other.name
                    ));
                }
            }
            if let Some(admin) = &self.admin_token {
                if tenant.keys().any(|key| key == admin) {
                    return invalid(format!("tenant {name}: an API key equals admin_token"));
                }
            }
        }
        Ok(())
    }

    /// The distinct databases (the top-level one first) and, per tenant in
    /// order, the index of its database among them.
    pub fn databases(&self) -> (Vec<DatabaseUrl>, Vec<usize>) {
        let mut databases = vec![self.database_url.clone()];
        let mut of_tenant = Vec::new();
        for tenant in &self.tenants {
            let url = tenant.database_url.as_ref().unwrap_or(&self.database_url);
            let index = match databases.iter().position(|d| d == url) {
                Some(index) => index,
                None => {
                    databases.push(url.clone());
                    databases.len() - 1
                }
            };
            of_tenant.push(index);
        }
        (databases, of_tenant)
    }

    /// The base URL other brokers reach this one at, once it is bound to
    /// `bound`: `advertise_url` when set, else `http://{bound}`, where a
    /// wildcard address (`0.0.0.0`, `::`) is replaced by the first address
    /// of an interface that is up and not loopback (IPv4 for `0.0.0.0`;
    /// IPv6, then IPv4 for `::`), or by loopback when there is none.
    pub fn advertise_url_for(&self, bound: SocketAddr) -> String {
        if let Some(url) = &self.advertise_url {
            return url.trim_end_matches('/').to_owned();
        }
        let ip = match bound.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                interface_address(false).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
            }
            IpAddr::V6(ip) if ip.is_unspecified() => interface_address(true)
                .or_else(|| interface_address(false))
                .unwrap_or(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            ip => ip,
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", SocketAddr::new(ip, bound.port()))
    }

    /// The bound on one operation's database work.
    pub fn db_timeout(&self) -> Duration {
        Duration::from_millis(self.db_timeout_ms)
    }

    /// The policy call deadline as a `Duration`.
    pub fn policy_deadline(&self) -> Duration {
        Duration::from_millis(self.policy_deadline_ms)
    }

    /// A tenant's policy call deadline: its own, else the top-level one.
    pub fn tenant_policy_deadline(&self, tenant: &TenantConfig) -> Duration {
        Duration::from_millis(tenant.policy_deadline_ms.unwrap_or(self.policy_deadline_ms))
    }

    /// A tenant's policy memory limit: its own, else the top-level one.
    pub fn tenant_policy_memory_bytes(&self, tenant: &TenantConfig) -> usize {
        tenant
            .policy_memory_bytes
            .unwrap_or(self.policy_memory_bytes)
    }
}

/// The first address of an interface that is up, not loopback and (for
/// IPv6) not link-local, in the kernel's order: IPv6 when `v6`, else IPv4.
fn interface_address(v6: bool) -> Option<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list that we only read
    // and free once with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is a node of the list, valid until freeifaddrs.
        let entry = unsafe { &*at };
        at = entry.ifa_next;
        let flags = entry.ifa_flags;
        let up = flags & (libc::IFF_UP as libc::c_uint) != 0;
        let loopback = flags & (libc::IFF_LOOPBACK as libc::c_uint) != 0;
        if entry.ifa_addr.is_null() || !up || loopback {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family
        // says which sockaddr_* it is.
        let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
        found = match family {
            libc::AF_INET if !v6 => {
                // SAFETY: AF_INET: a sockaddr_in.
                let sin = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in>() };
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 if v6 => {
                // SAFETY: AF_INET6: a sockaddr_in6.
                let sin6 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in6>() };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                // fe80::/10 needs a scope id: no use to other machines.
                let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
                (!link_local).then_some(IpAddr::V6(ip))
            }
            _ => None,
        };
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// Whether `url` is a usable OTLP base URL: `http` or `https`, a host, an
/// optional path, and nothing that could carry a secret (a user or
/// password, a query) into a log line or an error.
fn otlp_endpoint_ok(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    !authority.is_empty()
        && !url.contains(['@', '?', '#'])
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
        && url.parse::<hyper::Uri>().is_ok()
}

/// What is wrong with a policy deadline, if anything.
fn policy_deadline_problem(ms: u64) -> Option<&'static str> {
    (ms == 0 || ms > 10_000).then_some("must be 1 to 10000")
}

/// What is wrong with a policy memory limit, if anything.
fn policy_memory_problem(bytes: usize) -> Option<&'static str> {
    (bytes < (1 << 20)).then_some("must be at least 1 MiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_api_md_example() {
        let config = Config::from_toml(
            r#"
listen = "127.0.0.1:7420"
database_url = "mysql://root@127.0.0.1:3306/lockbroker"
admin_token = "secret"
policy_dir = "plugins/dist"

[[tenant]]
name = "team-a"
api_key = "key-a"
policy = "team-a.wasm"
max_ttl_ms = 3600000
max_waiters = 10000
"#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.tenants[0].policy.as_deref(), Some("team-a.wasm"));
        assert_eq!(config.max_connections, 32);
        assert!(!config.dev_defaults);
    }

    #[test]
    fn dev_defaults_have_one_tenant() {
        let config = Config::dev();
        config.validate().unwrap();
        assert!(config.dev_defaults);
        assert_eq!(config.tenants[0].name, "default");
        assert!(config.tenants[0].keys().eq([&secret_of("dev-key")]));
        assert_eq!(config.admin_token, Some(secret_of("dev-admin")));
    }

    /// `config` with the environment `vars` applied.
    fn with_env(config: &mut Config, vars: &[(&str, &str)]) -> Result<(), ConfigError> {
        config.apply_env(|name| {
            vars.iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn environment_overrides_win() {
        let mut config = Config::dev();
        let vars = [
            ("LOCKBROKER_LISTEN", "0.0.0.0:9000"),
            ("LOCKBROKER_DATABASE_URL", "mysql://x@h/db"),
        ];
        with_env(&mut config, &vars).unwrap();
        assert_eq!(config.listen.port(), 9000);
        assert_eq!(config.database_url.0, ["mysql://x@h/db"]);
        config
            .apply_env(|name| {
                (name == "LOCKBROKER_DATABASE_URL")
                    .then(|| "mysql://a@db1/x, mysql://a@db2/x".into())
            })
            .unwrap();
        assert_eq!(
            config.database_url.0,
            ["mysql://a@db1/x", "mysql://a@db2/x"]
        );
        let err = config
            .apply_env(|_| Some("not an address".into()))
            .unwrap_err();
        assert!(err.to_string().contains("LOCKBROKER_LISTEN"));
    }

    #[test]
    fn metrics_token_and_log_format_come_from_the_file_or_the_environment() {
        let mut config = Config::from_toml(
            "metrics_token = \"m\"\nlog_format = \"json\"\n[[tenant]]\nname = \"a\"\napi_key = \"k\"",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.metrics_token, Some(secret_of("m")));
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(Config::dev().log_format, LogFormat::Text);
        assert_eq!(Config::dev().metrics_token, None);
        let vars = [
            ("LOCKBROKER_METRICS_TOKEN", "n"),
            ("LOCKBROKER_LOG_FORMAT", "TEXT"),
        ];
        with_env(&mut config, &vars).unwrap();
        assert_eq!(config.metrics_token, Some(secret_of("n")));
        assert_eq!(config.log_format, LogFormat::Text);
        let err = config
            .apply_env(|name| (name == "LOCKBROKER_LOG_FORMAT").then(|| "xml".into()))
            .unwrap_err();
        assert!(err.to_string().contains("xml"), "{err}");
        assert!(Config::from_toml(
            "log_format = \"xml\"\n[[tenant]]\nname = \"a\"\napi_key = \"k\""
        )
        .is_err());
        let err = with_env(&mut config, &[("LOCKBROKER_METRICS_TOKEN", "")]).unwrap_err();
        assert!(err.to_string().contains("must not be empty"), "{err}");
    }

    #[test]
    fn the_otlp_endpoint_comes_from_the_file_or_the_environment_and_is_checked() {
        let tenant = "[[tenant]]\nname = \"a\"\napi_key = \"k\"";
        let config = Config::dev();
        assert_eq!(config.otlp_endpoint, None, "no tracing by default");
        assert_eq!(config.otlp_service_name, "lockbroker");
        let mut config = Config::from_toml(&format!(
            "otlp_endpoint = \"http://collector:4318\"\notlp_service_name = \"lb-eu\"\n{tenant}"
        ))
        .unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        assert_eq!(config.otlp_service_name, "lb-eu");
        let vars = [
            ("LOCKBROKER_OTLP_ENDPOINT", "https://otel.internal/base"),
            ("LOCKBROKER_OTLP_SERVICE_NAME", "lb-us"),
        ];
        with_env(&mut config, &vars).unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.otlp_endpoint.as_deref(),
            Some("https://otel.internal/base")
        );
        assert_eq!(config.otlp_service_name, "lb-us");
        // An empty variable turns tracing off.
        with_env(&mut config, &[("LOCKBROKER_OTLP_ENDPOINT", "")]).unwrap();
        assert_eq!(config.otlp_endpoint, None);
        for bad in [
            "otlp_endpoint = \"collector:4318\"",
            "otlp_endpoint = \"grpc://collector:4317\"",
            "otlp_endpoint = \"http://\"",
            "otlp_endpoint = \"http://user:pw@collector:4318\"",
            "otlp_endpoint = \"http://collector:4318/?token=x\"",
            "otlp_endpoint = \"http://coll ector:4318\"",
            "otlp_service_name = \"\"",
        ] {
            let config = Config::from_toml(&format!("{bad}\n{tenant}")).unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("otlp_"), "{bad}: {err}");
            assert!(!err.contains("pw@"), "the password is not repeated: {err}");
        }
    }

    fn secret_of(text: &str) -> Secret {
        Secret::try_from(text).unwrap()
    }

    #[test]
    fn keys_and_tokens_may_be_digests_and_a_tenant_may_have_several() {
        let digest = crate::secret::digest_text("new-key");
        let config = Config::from_toml(&format!(
            "admin_token = \"{}\"\n[[tenant]]\nname = \"a\"\napi_key = \"old-key\"\napi_keys = [\"{digest}\", \"third\"]",
            crate::secret::digest_text("admin")
        ))
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.admin_token, Some(secret_of("admin")));
        let keys: Vec<_> = config.tenants[0].keys().cloned().collect();
        assert_eq!(
            keys,
            [
                secret_of("old-key"),
                secret_of("new-key"),
                secret_of("third")
            ]
        );
        // Nothing of a key in the config's debug print.
        assert!(!format!("{config:?}").contains("old-key"));
        for bad in [
            "admin_token = \"\"\n[[tenant]]\nname = \"a\"\napi_key = \"k\"",
            "[[tenant]]\nname = \"a\"\napi_keys = [\"sha256:12\"]",
        ] {
            assert!(Config::from_toml(bad).is_err(), "accepted: {bad}");
        }
    }

    #[test]
    fn quotas_default_and_are_checked() {
        let config = Config::from_toml(
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmax_requests_per_s = 50\n[[tenant]]\nname = \"b\"\napi_key = \"j\"\nmax_held = 7\nmax_requests_per_s = 5\nmax_requests_burst = 6",
        )
        .unwrap();
        config.validate().unwrap();
        let (a, b) = (&config.tenants[0], &config.tenants[1]);
        assert_eq!((a.max_held, a.rate()), (1_000_000, Some((50, 100))));
        assert_eq!((b.max_held, b.rate()), (7, Some((5, 6))));
        assert_eq!(Config::dev().tenants[0].rate(), None);
    }

    #[test]
    fn database_url_is_a_string_or_a_list_and_tenants_may_have_their_own() {
        let config = Config::from_toml(
            r#"
database_url = ["mysql://lb@db1:3306/lockbroker", "mysql://lb@db2:3306/lockbroker"]
db_timeout_ms = 1500
[[tenant]]
name = "a"
api_key = "ka"
[[tenant]]
name = "b"
api_key = "kb"
database_url = "mysql://lb@shard2:3306/lockbroker"
[[tenant]]
name = "c"
api_key = "kc"
database_url = ["mysql://lb@db1:3306/lockbroker", "mysql://lb@db2:3306/lockbroker"]
"#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.db_timeout(), Duration::from_millis(1500));
        let (databases, of_tenant) = config.databases();
        assert_eq!(databases.len(), 2);
        assert_eq!(databases[1].0, ["mysql://lb@shard2:3306/lockbroker"]);
        assert_eq!(of_tenant, [0, 1, 0]);
        for bad in ["database_url = []", "db_timeout_ms = 5"] {
            let text = format!("{bad}\n[[tenant]]\nname = \"a\"\napi_key = \"k\"");
            let config = Config::from_toml(&text).unwrap();
            assert!(config.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn tenants_may_override_the_policy_limits() {
        let config = Config::from_toml(
            r#"
policy_deadline_ms = 7
policy_memory_bytes = 20971520
[[tenant]]
name = "py"
api_key = "k1"
policy_deadline_ms = 50
policy_memory_bytes = 134217728
[[tenant]]
name = "plain"
api_key = "k2"
"#,
        )
        .unwrap();
        config.validate().unwrap();
        let (py, plain) = (&config.tenants[0], &config.tenants[1]);
        assert_eq!(config.tenant_policy_deadline(py), Duration::from_millis(50));
        assert_eq!(config.tenant_policy_memory_bytes(py), 128 << 20);
        assert_eq!(
            config.tenant_policy_deadline(plain),
            Duration::from_millis(7)
        );
        assert_eq!(config.tenant_policy_memory_bytes(plain), 20 << 20);
        assert_eq!(config.max_policy_bytes, 64 << 20);
        for bad in [
            "policy_deadline_ms = 0",
            "policy_deadline_ms = 10001",
            "policy_memory_bytes = 1000",
        ] {
            let text = format!("[[tenant]]\nname = \"a\"\napi_key = \"k\"\n{bad}");
            let err = Config::from_toml(&text).unwrap().validate().unwrap_err();
            assert!(err.to_string().contains("tenant a:"), "{bad}: {err}");
        }
    }

    #[test]
    fn advertise_url_is_set_or_derived_from_the_bound_address() {
        let mut config = Config::dev();
        let bound: SocketAddr = "127.0.0.1:7421".parse().unwrap();
        assert_eq!(config.advertise_url_for(bound), "http://127.0.0.1:7421");
        let bound6: SocketAddr = "[::1]:7421".parse().unwrap();
        assert_eq!(config.advertise_url_for(bound6), "http://[::1]:7421");
        // A wildcard becomes some concrete address of this machine.
        let any: SocketAddr = "0.0.0.0:7421".parse().unwrap();
        let derived = config.advertise_url_for(any);
        let addr: SocketAddr = derived.strip_prefix("http://").unwrap().parse().unwrap();
        assert!(!addr.ip().is_unspecified() && addr.is_ipv4(), "{derived}");
        assert_eq!(addr.port(), 7421);
        config
            .apply_env(|name| {
                (name == "LOCKBROKER_ADVERTISE_URL").then(|| "http://lb-1.internal:7420/".into())
            })
            .unwrap();
        config.validate().unwrap();
        assert_eq!(config.advertise_url_for(any), "http://lb-1.internal:7420");
        config.advertise_url = Some("https://lb-1.internal:7420".into());
        config.validate().unwrap();
        for bad in [
            "ftp://x:1",
            "x:1",
            "http://",
            "http://x:1/path",
            "http://u@x:1",
        ] {
            config.advertise_url = Some(bad.into());
            assert!(config.validate().is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn rejects_bad_tenants() {
        let bad = [
            "[[tenant]]\nname = \"Team\"\napi_key = \"k\"",
            "[[tenant]]\nname = \"\"\napi_key = \"k\"",
            "[[tenant]]\nname = \"a\"\napi_key = \"\"",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\n[[tenant]]\nname = \"a\"\napi_key = \"j\"",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\n[[tenant]]\nname = \"b\"\napi_key = \"k\"",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\npolicy = \"../x.wasm\"",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmax_ttl_ms = 5",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nlock_delay_ms = 86400001",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmin_hold_ms = 86400001",
            "[[tenant]]\nname = \"a\"",
            "[[tenant]]\nname = \"a\"\napi_keys = []",
            "[[tenant]]\nname = \"a\"\napi_keys = [\"k\"]\n[[tenant]]\nname = \"b\"\napi_keys = [\"j\", \"k\"]",
            "admin_token = \"k\"\n[[tenant]]\nname = \"a\"\napi_keys = [\"j\", \"k\"]",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmax_held = 0",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmax_requests_per_s = 0",
            "[[tenant]]\nname = \"a\"\napi_key = \"k\"\nmax_requests_burst = 5",
            "history_retention_hours = 0\n[[tenant]]\nname = \"a\"\napi_key = \"k\"",
            "",
        ];
        for text in bad {
            let refused = Config::from_toml(text).map_or(true, |c| c.validate().is_err());
            assert!(refused, "accepted: {text}");
        }
        assert!(Config::from_toml("nonsense = 1").is_err());
    }

    #[test]
    fn history_retention_and_tenant_delays_default_and_parse() {
        let config = Config::dev();
        assert_eq!(config.history_retention_hours, 168);
        assert_eq!(
            (
                config.tenants[0].lock_delay_ms,
                config.tenants[0].min_hold_ms
            ),
            (0, 0)
        );
        let config = Config::from_toml(
            "history_retention_hours = 24\n[[tenant]]\nname = \"cron\"\napi_key = \"k\"\nlock_delay_ms = 15000\nmin_hold_ms = 3600000",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.history_retention_hours, 24);
        assert_eq!(
            (
                config.tenants[0].lock_delay_ms,
                config.tenants[0].min_hold_ms
            ),
            (15_000, 3_600_000)
        );
    }
}
