//! SQL filter expressions (AMQP Filter Expressions, section 6), the
//! subset RabbitMQ 4.2 evaluates on streams: comparisons, arithmetic,
//! `AND`/`OR`/`NOT` with SQL's three-valued logic, `[NOT] LIKE ... [ESCAPE
//! ...]`, `[NOT] IN (...)`, `IS [NOT] NULL` and `UTC()`, over a message's
//! header priority (`header.priority`, `h.priority`), its properties
//! (`properties.subject`, `p.subject`, ... with underscores for the
//! spec's hyphens) and its application properties (a bare name, `[a
//! name]`, `application_properties.key` or `a.key`). Keywords are upper
//! case. A message matches only when the expression is true: anything
//! that reads a field the message lacks is unknown, and unknown is not
//! true.
//!
//! [`parse`] refuses what is not an expression (too long, more than
//! [`MAX_TOKENS`] tokens, an unknown field, a reserved word): the
//! receiver's attach then leaves the filter out.

use crate::value::Value;

/// The longest expression taken, in characters (RabbitMQ's limit).
pub const MAX_LENGTH: usize = 4096;
/// The most tokens an expression may have.
pub const MAX_TOKENS: usize = 200;
/// The descriptor of the SQL filter: its name and code.
pub const SQL_FILTER: (&str, u64) = ("amqp:sql-filter", 0x120);

/// The properties section's fields as SQL names them.
const PROPERTY_FIELDS: [&str; 13] = [
    "message_id",
    "user_id",
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "absolute_expiry_time",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
];

const KEYWORDS: [&str; 11] = [
    "AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE", "UTC",
];
const RESERVED: [&str; 9] = [
    "exists",
    "nan",
    "inf",
    "lower",
    "upper",
    "left",
    "right",
    "substring",
    "date",
];

/// A field an expression reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Priority,
    /// By position in the properties list.
    Property(usize),
    Application(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Lit),
    Field(Field),
    Utc,
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Cmp, Box<Expr>, Box<Expr>),
    Arith(char, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Like {
        what: Box<Expr>,
        pattern: Vec<char>,
        escape: Option<char>,
        negated: bool,
    },
    In {
        what: Box<Expr>,
        list: Vec<Lit>,
        negated: bool,
    },
    IsNull {
        what: Field,
        negated: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A value an expression computes with.
#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Ident(String),
    /// `[...]`: an application property's key, whatever it holds.
    Delimited(String),
    Int(i64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Op(&'static str),
}

fn lex(s: &str) -> Result<Vec<Token>, String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        if out.len() >= MAX_TOKENS {
            return Err(format!("more than {MAX_TOKENS} tokens"));
        }
        if ch == '0' && c.get(i + 1) == Some(&'x') {
            let mut j = i + 2;
            while c.get(j).is_some_and(|x| x.is_ascii_alphanumeric()) {
                j += 1;
            }
            let hex: String = c[i + 2..j].iter().collect();
            if hex.is_empty()
                || !hex.len().is_multiple_of(2)
                || !hex
                    .chars()
                    .all(|x| x.is_ascii_digit() || ('A'..='F').contains(&x))
            {
                return Err("binary literals are pairs of upper-case hex digits".into());
            }
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).map_err(|e| e.to_string()))
                .collect::<Result<Vec<u8>, String>>()?;
            out.push(Token::Bin(bytes));
            i = j;
        } else if ch.is_ascii_digit() {
            let mut j = i;
            while c.get(j).is_some_and(char::is_ascii_digit) {
                j += 1;
            }
            let mut float = false;
            if c.get(j) == Some(&'.') && c.get(j + 1).is_some_and(char::is_ascii_digit) {
                float = true;
                j += 1;
                while c.get(j).is_some_and(char::is_ascii_digit) {
                    j += 1;
                }
            }
            if c.get(j) == Some(&'E') {
                float = true;
                j += 1;
                if matches!(c.get(j), Some('+') | Some('-')) {
                    j += 1;
                }
                if !c.get(j).is_some_and(char::is_ascii_digit) {
                    return Err("an exponent without digits".into());
                }
                while c.get(j).is_some_and(char::is_ascii_digit) {
                    j += 1;
                }
            }
            let text: String = c[i..j].iter().collect();
            out.push(if float {
                Token::Float(text.parse().map_err(|_| format!("bad number {text}"))?)
            } else {
                Token::Int(text.parse().map_err(|_| format!("bad number {text}"))?)
            });
            i = j;
        } else if ch == '\'' || ch == '"' {
            let mut j = i + 1;
            let mut text = String::new();
            loop {
                match c.get(j) {
                    None => return Err("an unterminated string".into()),
                    Some(x) if *x == ch => {
                        if c.get(j + 1) == Some(&ch) {
                            text.push(ch);
                            j += 2;
                        } else {
                            j += 1;
                            break;
                        }
                    }
                    Some(x) => {
                        text.push(*x);
                        j += 1;
                    }
                }
            }
            out.push(Token::Str(text));
            i = j;
        } else if ch == '[' {
            let mut j = i + 1;
            let mut text = String::new();
            loop {
                match c.get(j) {
                    None => return Err("an unterminated [identifier]".into()),
                    Some(']') if c.get(j + 1) == Some(&']') => {
                        text.push(']');
                        j += 2;
                    }
                    Some('[') if c.get(j + 1) == Some(&'[') => {
                        text.push('[');
                        j += 2;
                    }
                    Some(']') => {
                        j += 1;
                        break;
                    }
                    Some(x) if x.is_control() => return Err("a control character in an identifier".into()),
                    Some(x) => {
                        text.push(*x);
                        j += 1;
                    }
                }
            }
            out.push(Token::Delimited(text));
            i = j;
        } else if ch.is_ascii_alphabetic() {
            let mut j = i;
            while c
                .get(j)
                .is_some_and(|x| x.is_ascii_alphanumeric() || *x == '_' || *x == '.')
            {
                j += 1;
            }
            let text: String = c[i..j].iter().collect();
            if KEYWORDS.contains(&text.as_str()) {
                out.push(Token::Word(text));
            } else {
                out.push(Token::Ident(text));
            }
            i = j;
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let op = ["<>", "!=", "<=", ">="]
                .into_iter()
                .find(|o| *o == two)
                .or_else(|| {
                    ["=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ","]
                        .into_iter()
                        .find(|o| o.starts_with(ch))
                })
                .ok_or_else(|| format!("unexpected {ch:?}"))?;
            i += op.chars().count();
            out.push(Token::Op(op));
        }
    }
    Ok(out)
}

/// The field a (non-delimited or delimited) identifier names.
fn field(name: &str, delimited: bool) -> Result<Field, String> {
    if delimited {
        return Ok(Field::Application(name.to_string()));
    }
    let (prefix, rest) = match name.split_once('.') {
        Some((p, r)) => (Some(p), r),
        None => (None, name),
    };
    let check = |n: &str| {
        let lower = n.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) || KEYWORDS.contains(&n.to_ascii_uppercase().as_str()) {
            Err(format!("{n} is a reserved word"))
        } else if n.is_empty() || n.contains('.') {
            Err(format!("no such field {name}"))
        } else {
            Ok(())
        }
    };
    match prefix {
        None => {
            check(rest)?;
            Ok(Field::Application(rest.to_string()))
        }
        Some("header" | "h") if rest == "priority" => Ok(Field::Priority),
        Some("properties" | "p") => PROPERTY_FIELDS
            .iter()
            .position(|f| *f == rest)
            .map(Field::Property)
            .ok_or_else(|| format!("no such property {rest}")),
        Some("application_properties" | "a") => {
            check(rest)?;
            Ok(Field::Application(rest.to_string()))
        }
        _ => Err(format!("no such field {name}")),
    }
}

struct Parser {
    t: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.t.get(self.at)
    }
    fn word(&mut self, w: &str) -> bool {
        if matches!(self.peek(), Some(Token::Word(x)) if x == w) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn op(&mut self, o: &str) -> bool {
        if matches!(self.peek(), Some(Token::Op(x)) if *x == o) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn expect_op(&mut self, o: &str) -> Result<(), String> {
        if self.op(o) {
            Ok(())
        } else {
            Err(format!("expected {o}"))
        }
    }
    fn or(&mut self) -> Result<Expr, String> {
        let mut e = self.and()?;
        while self.word("OR") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut e = self.not()?;
        while self.word("AND") {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Ok(e)
    }
    fn not(&mut self) -> Result<Expr, String> {
        if self.word("NOT") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.comparison()
    }
    fn comparison(&mut self) -> Result<Expr, String> {
        let left = self.sum()?;
        let cmp = [
            ("=", Cmp::Eq),
            ("<>", Cmp::Ne),
            ("!=", Cmp::Ne),
            ("<=", Cmp::Le),
            (">=", Cmp::Ge),
            ("<", Cmp::Lt),
            (">", Cmp::Gt),
        ]
        .into_iter()
        .find(|(o, _)| matches!(self.peek(), Some(Token::Op(x)) if x == o));
        if let Some((_, c)) = cmp {
            self.at += 1;
            return Ok(Expr::Compare(c, Box::new(left), Box::new(self.sum()?)));
        }
        let negated = self.word("NOT");
        if self.word("LIKE") {
            let Some(Token::Str(p)) = self.peek().cloned() else {
                return Err("LIKE takes a string".into());
            };
            self.at += 1;
            let escape = if self.word("ESCAPE") {
                match self.peek().cloned() {
                    Some(Token::Str(e)) if e.chars().count() == 1 => {
                        self.at += 1;
                        e.chars().next()
                    }
                    _ => return Err("ESCAPE takes one character".into()),
                }
            } else {
                None
            };
            return Ok(Expr::Like {
                what: Box::new(left),
                pattern: p.chars().collect(),
                escape,
                negated,
            });
        }
        if self.word("IN") {
            self.expect_op("(")?;
            let mut list = Vec::new();
            loop {
                match self.peek().cloned() {
                    Some(Token::Str(s)) => list.push(Lit::Str(s.into_bytes())),
                    Some(Token::Int(n)) => list.push(Lit::Int(n)),
                    Some(Token::Float(f)) => list.push(Lit::Float(f)),
                    _ => return Err("IN takes a list of literals".into()),
                }
                self.at += 1;
                if self.op(")") {
                    break;
                }
                self.expect_op(",")?;
            }
            return Ok(Expr::In {
                what: Box::new(left),
                list,
                negated,
            });
        }
        if negated {
            return Err("NOT where LIKE or IN was expected".into());
        }
        if self.word("IS") {
            let negated = self.word("NOT");
            if !self.word("NULL") {
                return Err("IS takes NULL".into());
            }
            let Expr::Field(f) = left else {
                return Err("IS NULL applies to a field".into());
            };
            return Ok(Expr::IsNull { what: f, negated });
        }
        Ok(left)
    }
    fn sum(&mut self) -> Result<Expr, String> {
        let mut e = self.product()?;
        loop {
            let o = if self.op("+") {
                '+'
            } else if self.op("-") {
                '-'
            } else {
                return Ok(e);
            };
            e = Expr::Arith(o, Box::new(e), Box::new(self.product()?));
        }
    }
    fn product(&mut self) -> Result<Expr, String> {
        let mut e = self.unary()?;
        loop {
            let o = if self.op("*") {
                '*'
            } else if self.op("/") {
                '/'
            } else if self.op("%") {
                '%'
            } else {
                return Ok(e);
            };
            e = Expr::Arith(o, Box::new(e), Box::new(self.unary()?));
        }
    }
    fn unary(&mut self) -> Result<Expr, String> {
        if self.op("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.op("+") {
            return self.unary();
        }
        self.primary()
    }
    fn primary(&mut self) -> Result<Expr, String> {
        let t = self.peek().cloned().ok_or("the expression ends early")?;
        self.at += 1;
        Ok(match t {
            Token::Op("(") => {
                let e = self.or()?;
                self.expect_op(")")?;
                e
            }
            Token::Int(n) => Expr::Literal(Lit::Int(n)),
            Token::Float(f) => Expr::Literal(Lit::Float(f)),
            Token::Str(s) => Expr::Literal(Lit::Str(s.into_bytes())),
            Token::Bin(b) => Expr::Literal(Lit::Str(b)),
            Token::Word(w) if w == "TRUE" => Expr::Literal(Lit::Bool(true)),
            Token::Word(w) if w == "FALSE" => Expr::Literal(Lit::Bool(false)),
            Token::Word(w) if w == "UTC" => {
                self.expect_op("(")?;
                self.expect_op(")")?;
                Expr::Utc
            }
            Token::Ident(name) => Expr::Field(field(&name, false)?),
            Token::Delimited(name) => Expr::Field(field(&name, true)?),
            other => return Err(format!("unexpected {other:?}")),
        })
    }
}

/// Parse an SQL filter expression.
pub fn parse(text: &str) -> Result<Expr, String> {
    if text.chars().count() > MAX_LENGTH {
        return Err(format!("longer than {MAX_LENGTH} characters"));
    }
    let mut p = Parser { t: lex(text)?, at: 0 };
    let e = p.or()?;
    if p.at != p.t.len() {
        return Err(format!("unexpected {:?}", p.t[p.at]));
    }
    Ok(e)
}

/// What an expression reads of one message.
pub struct Fields<'a> {
    pub priority: Option<u8>,
    pub properties: &'a [Value],
    pub application: &'a [(Value, Value)],
    /// Now, for `UTC()`, in milliseconds since the epoch.
    pub now_ms: i64,
}

/// A message value as one SQL computes with (None: not one it knows).
fn lit(v: &Value) -> Option<Lit> {
    Some(match v {
        Value::Bool(b) => Lit::Bool(*b),
        Value::Ubyte(n) => Lit::Int(*n as i64),
        Value::Ushort(n) => Lit::Int(*n as i64),
        Value::Uint(n) => Lit::Int(*n as i64),
        Value::Ulong(n) => Lit::Int(i64::try_from(*n).ok()?),
        Value::Byte(n) => Lit::Int(*n as i64),
        Value::Short(n) => Lit::Int(*n as i64),
        Value::Int(n) => Lit::Int(*n as i64),
        Value::Long(n) => Lit::Int(*n),
        Value::Timestamp(n) => Lit::Int(*n),
        Value::Float(f) => Lit::Float(*f as f64),
        Value::Double(f) => Lit::Float(*f),
        Value::String(s) | Value::Symbol(s) => Lit::Str(s.as_bytes().to_vec()),
        Value::Binary(b) => Lit::Str(b.to_vec()),
        Value::Uuid(u) => Lit::Str(u.to_vec()),
        _ => return None,
    })
}

fn num(l: &Lit) -> Option<f64> {
    match l {
        Lit::Int(n) => Some(*n as f64),
        Lit::Float(f) => Some(*f),
        _ => None,
    }
}

fn equal(a: &Lit, b: &Lit) -> bool {
    match (a, b) {
        (Lit::Str(x), Lit::Str(y)) => x == y,
        (Lit::Bool(x), Lit::Bool(y)) => x == y,
        _ => matches!((num(a), num(b)), (Some(x), Some(y)) if x == y),
    }
}

/// Does `s` match the LIKE pattern (`%` any run, `_` one character,
/// `escape` before either for itself)? In time proportional to the
/// product of their lengths, whatever the pattern (no backtracking).
fn like(s: &[char], p: &[char], escape: Option<char>) -> bool {
    enum Part {
        Any,
        One,
        Is(char),
    }
    let mut parts = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            c if Some(c) == escape => match p.get(i + 1) {
                Some(lit) => {
                    parts.push(Part::Is(*lit));
                    i += 1;
                }
                None => return false,
            },
            '%' => parts.push(Part::Any),
            '_' => parts.push(Part::One),
            c => parts.push(Part::Is(c)),
        }
        i += 1;
    }
    // at[j]: the first j characters of `s` match the parts seen so far.
    let mut at = vec![false; s.len() + 1];
    at[0] = true;
    for part in &parts {
        let mut next = vec![false; s.len() + 1];
        match part {
            Part::Any => {
                let mut seen = false;
                for j in 0..=s.len() {
                    seen |= at[j];
                    next[j] = seen;
                }
            }
            Part::One => {
                next[1..].copy_from_slice(&at[..s.len()]);
            }
            Part::Is(c) => {
                for j in 1..=s.len() {
                    next[j] = at[j - 1] && s[j - 1] == *c;
                }
            }
        }
        at = next;
    }
    at[s.len()]
}

impl Expr {
    /// Is the expression true for the message? (False and unknown are not.)
    pub fn matches(&self, f: &Fields) -> bool {
        self.eval(f) == Some(Lit::Bool(true))
    }

    fn read(field: &Field, f: &Fields) -> Option<Lit> {
        match field {
            // A message without a priority has the default, 4.
            Field::Priority => Some(Lit::Int(f.priority.unwrap_or(4) as i64)),
            Field::Property(i) => f.properties.get(*i).and_then(lit),
            Field::Application(k) => f
                .application
                .iter()
                .find(|(key, _)| matches!(key, Value::String(s) if s == k))
                .and_then(|(_, v)| lit(v)),
        }
    }

    /// The value, None for unknown.
    fn eval(&self, f: &Fields) -> Option<Lit> {
        let boolean = |e: &Expr| match e.eval(f) {
            Some(Lit::Bool(b)) => Some(b),
            _ => None,
        };
        match self {
            Expr::Literal(l) => Some(l.clone()),
            Expr::Field(field) => Self::read(field, f),
            Expr::Utc => Some(Lit::Int(f.now_ms)),
            Expr::Not(e) => boolean(e).map(|b| Lit::Bool(!b)),
            Expr::And(a, b) => match (boolean(a), boolean(b)) {
                (Some(false), _) | (_, Some(false)) => Some(Lit::Bool(false)),
                (Some(true), Some(true)) => Some(Lit::Bool(true)),
                _ => None,
            },
            Expr::Or(a, b) => match (boolean(a), boolean(b)) {
                (Some(true), _) | (_, Some(true)) => Some(Lit::Bool(true)),
                (Some(false), Some(false)) => Some(Lit::Bool(false)),
                _ => None,
            },
            Expr::Compare(c, a, b) => {
                let (x, y) = (a.eval(f)?, b.eval(f)?);
                Some(Lit::Bool(match c {
                    Cmp::Eq => equal(&x, &y),
                    Cmp::Ne => !equal(&x, &y),
                    order => {
                        let o = match (&x, &y) {
                            (Lit::Str(p), Lit::Str(q)) => p.partial_cmp(q),
                            _ => num(&x).zip(num(&y)).and_then(|(p, q)| p.partial_cmp(&q)),
                        };
                        let Some(o) = o else { return Some(Lit::Bool(false)) };
                        match order {
                            Cmp::Lt => o.is_lt(),
                            Cmp::Le => o.is_le(),
                            Cmp::Gt => o.is_gt(),
                            _ => o.is_ge(),
                        }
                    }
                }))
            }
            Expr::Arith(o, a, b) => {
                let (x, y) = (a.eval(f)?, b.eval(f)?);
                match (o, &x, &y) {
                    ('%', Lit::Int(p), Lit::Int(q)) if *q != 0 => Some(Lit::Int(p.checked_rem(*q)?)),
                    ('%', ..) => None,
                    ('/', ..) => {
                        let (p, q) = (num(&x)?, num(&y)?);
                        (q != 0.0).then(|| Lit::Float(p / q))
                    }
                    (_, Lit::Int(p), Lit::Int(q)) => Some(Lit::Int(match o {
                        '+' => p.checked_add(*q)?,
                        '-' => p.checked_sub(*q)?,
                        _ => p.checked_mul(*q)?,
                    })),
                    _ => {
                        let (p, q) = (num(&x)?, num(&y)?);
                        Some(Lit::Float(match o {
                            '+' => p + q,
                            '-' => p - q,
                            _ => p * q,
                        }))
                    }
                }
            }
            Expr::Neg(e) => match e.eval(f)? {
                Lit::Int(n) => Some(Lit::Int(n.checked_neg()?)),
                Lit::Float(x) => Some(Lit::Float(-x)),
                _ => None,
            },
            Expr::Like {
                what,
                pattern,
                escape,
                negated,
            } => match what.eval(f)? {
                Lit::Str(s) => {
                    let s: Vec<char> = String::from_utf8_lossy(&s).chars().collect();
                    Some(Lit::Bool(like(&s, pattern, *escape) != *negated))
                }
                _ => None,
            },
            Expr::In { what, list, negated } => {
                let v = what.eval(f)?;
                Some(Lit::Bool(list.iter().any(|l| equal(l, &v)) != *negated))
            }
            Expr::IsNull { what, negated } => Some(Lit::Bool(Self::read(what, f).is_none() != *negated)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(props: &'a [Value], app: &'a [(Value, Value)]) -> Fields<'a> {
        Fields {
            priority: None,
            properties: props,
            application: app,
            now_ms: 1_000,
        }
    }

    fn check(expr: &str, props: &[Value], app: &[(Value, Value)]) -> bool {
        parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches(&fields(props, app))
    }

    #[test]
    fn expressions_over_properties_and_application_properties() {
        let mut props = vec![Value::Null; 13];
        props[3] = Value::string("in_the_filter-1");
        props[2] = Value::string("the_id");
        let app = vec![
            (Value::string("key"), Value::string("value")),
            (Value::string("n"), Value::Long(7)),
            (Value::string("a key"), Value::Double(2.5)),
        ];
        for (e, want) in [
            ("properties.subject LIKE '%in_the_filter%'", true),
            ("p.subject LIKE 'in\\_the%' ESCAPE '\\'", true),
            ("p.subject LIKE 'in_the_filter-_'", true),
            ("p.subject LIKE '%%%filter%%-%'", true),
            ("p.subject LIKE 'in_the_filter'", false),
            ("p.subject NOT LIKE '%in_the_filter%'", false),
            (
                "p.subject LIKE '%in_the_filter%' AND properties.to = 'the_id' AND key = 'value'",
                true,
            ),
            ("a.n > 5 AND n < 10 AND n % 2 = 1", true),
            ("n * 2 = 14.0 AND n / 2 = 3.5 AND -n = -7", true),
            ("[a key] = 2.5", true),
            ("key IN ('x', 'value')", true),
            ("key NOT IN ('x', 'value')", false),
            ("missing IS NULL AND key IS NOT NULL", true),
            // Unknown is not true; NOT unknown is unknown.
            ("missing = 1", false),
            ("NOT (missing = 1)", false),
            ("missing = 1 OR n = 7", true),
            ("header.priority = 4 AND h.priority < 5", true),
            ("UTC() > 0", true),
            ("p.subject = 'in_the_filter-1' OR FALSE", true),
            ("key > 1", false),
        ] {
            assert_eq!(check(e, &props, &app), want, "{e}");
        }
    }

    #[test]
    fn what_is_not_an_expression_is_refused() {
        for e in [
            "",
            "key = ",
            "key == 'x'",
            "key = 'x' and n = 1",
            "p.colour = 'x'",
            "lower = 1",
            "key LIKE 1",
            "p.subject IS NULL AND (n = 1",
            "0xab = key",
            "'unterminated",
        ] {
            assert!(parse(e).is_err(), "{e:?} parsed");
        }
        let long = format!("key = '{}'", "x".repeat(MAX_LENGTH));
        assert!(parse(&long).is_err());
        let many = vec!["n = 1"; 60].join(" OR ");
        assert!(parse(&many).is_err(), "too many tokens");
    }
}
