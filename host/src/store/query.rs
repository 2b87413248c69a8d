//! One statement and its parameters: the SQL, and the values bound to its
//! `?`s in order, given as a tuple ([`Params`]). Every query of the store
//! goes through the four calls on [`Conn`] here, which run it by the
//! connection's deadline (`Conn::run`), as a prepared statement.

use sqlx::{
    mysql::{MySql, MySqlArguments, MySqlQueryResult, MySqlRow},
    Arguments, Encode, FromRow, Type,
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
        impl<'q, $($t: Encode<'q, MySql> + Type<MySql> + Send + 'q),*> Params<'q> for ($($t,)*) {
            #[allow(unused_variables)]
            fn add_to(self, arguments: &mut MySqlArguments) -> sqlx::Result<()> {
                let ($($v,)*) = self;
                $(arguments.add($v).map_err(sqlx::Error::Encode)?;)*
                Ok(())
            }
        }
    };
}

impl<'q, P: Params<'q>> Params<'q> for Vec<P> {
    fn add_to(self, arguments: &mut MySqlArguments) -> sqlx::Result<()> {
        self.into_iter().try_for_each(|row| row.add_to(arguments))
    }
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
        let arguments = params.arguments()?;
        self.run(|c| sqlx::query_as_with(sql, arguments).fetch_all(c))
            .await
    }
}
