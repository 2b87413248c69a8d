//! One statement and its parameters: the SQL, and the values bound to its
//! `?`s in order, given as a tuple ([`Params`]). Every query of the store
//! goes through the calls on [`Conn`] here, which run it by the
//! connection's deadline (`Conn::run`): as a prepared statement, or, when
//! statements are queued to go with it (a transaction's `BEGIN`, writes
//! deferred by [`Conn::defer`]), as one text query with the values written
//! in as literals ([`Literal`]: strings as hex, so no value is ever parsed
//! as SQL).

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use futures_util::TryStreamExt;
use sqlx::{
    mysql::{MySql, MySqlArguments, MySqlQueryResult, MySqlRow},
    Arguments, Either, Encode, FromRow, Type,
};

use super::pool::Conn;

/// The values bound to a statement's `?`s, in order: a tuple of them, or
/// a list of such tuples for a statement of many rows (`VALUES (?, ?), (?,
/// ?)`, `IN ((?, ?), (?, ?))`).
pub trait Params<'q>: Send {
    /// Appends the values, as the driver sends them, to `arguments`.
    ///
    /// # Errors
    /// A value that cannot be encoded.
    fn add_to(self, arguments: &mut MySqlArguments) -> sqlx::Result<()>;

    /// Writes the values as SQL literals, in order, to `out`.
    fn literals(&self, out: &mut Vec<String>);

    /// The values as the driver sends them.
    ///
    /// # Errors
    /// A value that cannot be encoded.
    fn arguments(self) -> sqlx::Result<MySqlArguments>
    where
        Self: Sized,
    {
        let mut arguments = MySqlArguments::default();
        self.add_to(&mut arguments)?;
        Ok(arguments)
    }
}

macro_rules! params {
    ($($t:ident $v:ident),*) => {
        impl<'q, $($t: Encode<'q, MySql> + Type<MySql> + Literal + Send + 'q),*> Params<'q> for ($($t,)*) {
            #[allow(unused_variables)]
            fn add_to(self, arguments: &mut MySqlArguments) -> sqlx::Result<()> {
                let ($($v,)*) = self;
                $(arguments.add($v).map_err(sqlx::Error::Encode)?;)*
                Ok(())
            }

            #[allow(unused_variables)]
            fn literals(&self, out: &mut Vec<String>) {
                let ($($v,)*) = self;
                $(out.push($v.literal());)*
            }
        }
    };
}

impl<'q, P: Params<'q>> Params<'q> for Vec<P> {
    fn add_to(self, arguments: &mut MySqlArguments) -> sqlx::Result<()> {
        self.into_iter().try_for_each(|row| row.add_to(arguments))
    }

    fn literals(&self, out: &mut Vec<String>) {
        self.iter().for_each(|row| row.literals(out));
    }
}

/// A value written into the text of a statement. Strings and bytes are
/// written as hex (`X'6b6579'`), which the server reads as the same bytes
/// and never as SQL; times as typed literals.
pub trait Literal {
    fn literal(&self) -> String;
}

impl<T: Literal + ?Sized> Literal for &T {
    fn literal(&self) -> String {
        (**self).literal()
    }
}

impl<T: Literal> Literal for Option<T> {
    fn literal(&self) -> String {
        self.as_ref()
            .map_or_else(|| "NULL".to_owned(), Literal::literal)
    }
}

impl Literal for [u8] {
    fn literal(&self) -> String {
        let mut out = String::with_capacity(3 + 2 * self.len());
        out.push_str("X'");
        for b in self {
            let _ = write!(out, "{b:02x}");
        }
        out.push('\'');
        out
    }
}

impl Literal for Vec<u8> {
    fn literal(&self) -> String {
        self.as_slice().literal()
    }
}

impl Literal for str {
    fn literal(&self) -> String {
        self.as_bytes().literal()
    }
}

impl Literal for String {
    fn literal(&self) -> String {
        self.as_bytes().literal()
    }
}

impl Literal for bool {
    fn literal(&self) -> String {
        (if *self { "TRUE" } else { "FALSE" }).to_owned()
    }
}

impl Literal for NaiveDateTime {
    fn literal(&self) -> String {
        format!("TIMESTAMP'{}'", self.format("%Y-%m-%d %H:%M:%S%.6f"))
    }
}

macro_rules! integer_literals {
    ($($t:ty),*) => {
        $(impl Literal for $t {
            fn literal(&self) -> String {
                self.to_string()
            }
        })*
    };
}

integer_literals!(u8, u16, u32, u64, i8, i16, i32, i64);

/// `sql` with each `?` outside quotes replaced by the next of `values`.
fn written_in(sql: &str, values: &[String]) -> String {
    let mut out = String::with_capacity(sql.len() + values.iter().map(String::len).sum::<usize>());
    let mut values = values.iter();
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match (quote, c) {
            (None, '\'' | '"' | '`') => {
                quote = Some(c);
                out.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (None, '?') => out.push_str(values.next().map_or("?", String::as_str)),
            _ => out.push(c),
        }
    }
    debug_assert!(values.next().is_none(), "more values than `?`s in {sql}");
    out
}

/// `sql` with `params` written in.
fn render<'q>(sql: &str, params: &impl Params<'q>) -> String {
    let mut values = Vec::new();
    params.literals(&mut values);
    written_in(sql, &values)
}

params!();
params!(A a);
params!(A a, B b);
params!(A a, B b, C c);
params!(A a, B b, C c, D d);
params!(A a, B b, C c, D d, E e);
params!(A a, B b, C c, D d, E e, F f);
params!(A a, B b, C c, D d, E e, F f, G g);
params!(A a, B b, C c, D d, E e, F f, G g, H h);
params!(A a, B b, C c, D d, E e, F f, G g, H h, I i);
params!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
params!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
params!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);

/// A row a query returns, as the store reads it.
pub trait Row: for<'r> FromRow<'r, MySqlRow> + Send + Unpin {}
impl<T: for<'r> FromRow<'r, MySqlRow> + Send + Unpin> Row for T {}

impl Conn {
    /// Runs a statement that returns no rows.
    pub async fn execute<'q>(
        &mut self,
        sql: &'q str,
        params: impl Params<'q>,
    ) -> sqlx::Result<MySqlQueryResult> {
        if self.has_queued() {
            let text = self.take_queued_with(&render(sql, &params));
            return self.run_text(text).await.map(|(_, done)| done);
        }
        let arguments = params.arguments()?;
        self.run(|c| sqlx::query_with(sql, arguments).execute(c))
            .await
    }

    /// The first row a query returns, if any.
    pub async fn fetch_optional<'q, R: Row>(
        &mut self,
        sql: &'q str,
        params: impl Params<'q>,
    ) -> sqlx::Result<Option<R>> {
        if self.has_queued() {
            let text = self.take_queued_with(&render(sql, &params));
            let (rows, _) = self.run_text(text).await?;
            return rows.first().map(R::from_row).transpose();
        }
        let arguments = params.arguments()?;
        self.run(|c| sqlx::query_as_with(sql, arguments).fetch_optional(c))
            .await
    }

    /// The first row a query returns; `RowNotFound` when there is none.
    pub async fn fetch_one<'q, R: Row>(
        &mut self,
        sql: &'q str,
        params: impl Params<'q>,
    ) -> sqlx::Result<R> {
        self.fetch_optional(sql, params)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// Every row a query returns.
    pub async fn fetch_all<'q, R: Row>(
        &mut self,
        sql: &'q str,
        params: impl Params<'q>,
    ) -> sqlx::Result<Vec<R>> {
        if self.has_queued() {
            let text = self.take_queued_with(&render(sql, &params));
            let (rows, _) = self.run_text(text).await?;
            return rows.iter().map(R::from_row).collect();
        }
        let arguments = params.arguments()?;
        self.run(|c| sqlx::query_as_with(sql, arguments).fetch_all(c))
            .await
    }

    /// A write whose answer nobody reads, inside a transaction: queued to
    /// go with the transaction's next statement or its `COMMIT` (one round
    /// trip fewer). Its error, if any, is that statement's. Outside a
    /// transaction, or on Galera (`Conn::batches`), it runs at once.
    ///
    /// # Errors
    /// The statement's, when it runs at once.
    pub async fn defer<'q>(&mut self, sql: &'q str, params: impl Params<'q>) -> sqlx::Result<()> {
        if !self.may_defer() {
            return self.execute(sql, params).await.map(|_| ());
        }
        let text = render(sql, &params);
        self.queue(&text);
        Ok(())
    }

    /// Runs `text` (statements separated by `;`) in the text protocol: the
    /// rows it returns (only its last statement returns any) and the last
    /// statement's result.
    pub(super) async fn run_text(
        &mut self,
        text: String,
    ) -> sqlx::Result<(Vec<MySqlRow>, MySqlQueryResult)> {
        self.run(|c| async move {
            let mut rows = Vec::new();
            let mut last = MySqlQueryResult::default();
            let mut results = sqlx::raw_sql(&text).fetch_many(c);
            while let Some(item) = results.try_next().await? {
                match item {
                    Either::Left(done) => last = done,
                    Either::Right(row) => rows.push(row),
                }
            }
            Ok((rows, last))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_in_outside_quotes() {
        let sql = "SELECT '?', ? FROM t WHERE a = ? AND b = `x?` AND c IN (?)";
        let text = render(sql, &("k'ey", 7u64, None::<u32>));
        assert_eq!(
            text,
            "SELECT '?', X'6b276579' FROM t WHERE a = 7 AND b = `x?` AND c IN (NULL)"
        );
    }

    #[test]
    fn times_and_bytes_are_typed_literals() {
        let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 26)
            .unwrap()
            .and_hms_micro_opt(23, 5, 9, 42)
            .unwrap();
        assert_eq!(at.literal(), "TIMESTAMP'2026-11-26 23:05:09.000042'");
        assert_eq!("".literal(), "X''");
        // A statement of many rows: each row's values in turn.
        let mut values = Vec::new();
        Params::literals(&vec![(1u8, "a"), (2, "b")], &mut values);
        assert_eq!(values, ["1", "X'61'", "2", "X'62'"]);
    }
}
