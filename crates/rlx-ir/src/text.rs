//! The text form of a graph: readable, and parsed back exactly.
//!
//! ```text
//! graph "hello" {
//!   %0 = input() {"name":"x","shape":"f32[1,4]"} : f32[1,4]
//!   %1 = param() {"name":"w","shape":"f32[4,2]"} : f32[4,2]
//!   %2 = matmul(%0, %1) : f32[1,2]
//!   return %2
//! }
//! ```

use crate::{Error, Graph, NodeId, Op, Result, Shape};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt::Write;

/// Prints one op as `name` plus its attributes (JSON, omitted when empty).
pub fn op_text(op: &Op) -> (String, Option<String>) {
    // A custom op prints as its registered name with its own attributes.
    if let Op::Custom(c) = op {
        let attrs = c.attrs().as_object().filter(|o| !o.is_empty()).map(|o| Value::Object(o.clone()).to_string());
        return (c.name().to_string(), attrs);
    }
    let name = op.def().name().to_string();
    let mut obj = match serde_json::to_value(op) {
        Ok(Value::Object(o)) => o,
        _ => Map::new(),
    };
    obj.remove("op");
    // Family members print as their own name (`exp`), not as `unary {"kind":"exp"}`.
    if obj.get("kind").and_then(Value::as_str) == Some(name.as_str()) {
        obj.remove("kind");
    }
    let attrs = if obj.is_empty() { None } else { Some(Value::Object(obj).to_string()) };
    (name, attrs)
}

/// Builds an op from its text name and attributes.
pub fn op_from_text(name: &str, attrs: Map<String, Value>) -> std::result::Result<Op, String> {
    let tags = Op::variant_tags();
    let try_tag = |tag: &str, kind: Option<&str>| {
        let mut o = attrs.clone();
        o.insert("op".into(), Value::String(tag.into()));
        if let Some(k) = kind {
            o.insert("kind".into(), Value::String(k.into()));
        }
        serde_json::from_value::<Op>(Value::Object(o)).map_err(|e| e.to_string())
    };
    if tags.iter().any(|t| t == name) {
        return try_tag(name, None);
    }
    // A family member: find the family whose `kind` accepts this name.
    for tag in &tags {
        if let Ok(op) = try_tag(tag, Some(name))
            && op.def().name() == name
        {
            return Ok(op);
        }
    }
    if crate::custom::registered().contains(&name) {
        return crate::custom::from_attrs(name, &Value::Object(attrs)).map(Op::Custom).map_err(|e| e.to_string());
    }
    Err(format!("unknown op `{name}`"))
}

impl Graph {
    /// The text form.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph {} {{", Value::String(self.name().into()));
        for (i, n) in self.nodes().iter().enumerate() {
            let (name, attrs) = op_text(&n.op);
            let args: Vec<String> = n.inputs.iter().map(|x| x.to_string()).collect();
            let _ = write!(s, "  %{i} = {name}({})", args.join(", "));
            if let Some(a) = attrs {
                let _ = write!(s, " {a}");
            }
            let _ = writeln!(s, " : {}", n.ty);
        }
        let outs: Vec<String> = self.outputs().iter().map(|x| x.to_string()).collect();
        for (p, v) in self.updates() {
            let _ = writeln!(s, "  update {p} <- {v}");
        }
        let _ = writeln!(s, "  return {}", outs.join(", "));
        s.push_str("}\n");
        s
    }

    /// Parses the text form, re-inferring every type and checking it against the annotation.
    pub fn from_text(text: &str) -> Result<Graph> {
        let err = |line: usize, reason: String| Error::Parse { line, reason };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with("//"));
        let (ln, head) = lines.next().ok_or_else(|| err(1, "empty text".into()))?;
        let name_json = head
            .strip_prefix("graph ")
            .and_then(|r| r.strip_suffix('{'))
            .ok_or_else(|| err(ln, "expected `graph \"name\" {`".into()))?;
        let name: String = serde_json::from_str(name_json.trim()).map_err(|e| err(ln, format!("graph name: {e}")))?;
        let mut g = Graph::new(name);
        let mut ids: HashMap<String, NodeId> = HashMap::new();
        let mut done = false;
        for (ln, line) in lines {
            if done {
                return Err(err(ln, format!("text after the closing brace: `{line}`")));
            }
            if line == "}" {
                done = true;
                continue;
            }
            if let Some(rest) = line.strip_prefix("update ") {
                let (p, v) = rest.split_once("<-").ok_or_else(|| err(ln, "expected `update %p <- %v`".into()))?;
                let get = |s: &str| {
                    ids.get(s.trim()).copied().ok_or_else(|| err(ln, format!("unknown value `{}`", s.trim())))
                };
                g.update_param(get(p)?, get(v)?);
                continue;
            }
            if let Some(rest) = line.strip_prefix("return") {
                let outs = rest
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| ids.get(s).copied().ok_or_else(|| err(ln, format!("unknown value `{s}`"))))
                    .collect::<Result<Vec<_>>>()?;
                g.set_outputs(outs);
                continue;
            }
            let (lhs, rhs) =
                line.split_once(" = ").ok_or_else(|| err(ln, format!("expected `%id = op(...)`, got `{line}`")))?;
            let (body, ty) = rhs.rsplit_once(" : ").ok_or_else(|| err(ln, "missing ` : type`".into()))?;
            let ty: Shape = ty.parse().map_err(|e| err(ln, e))?;
            let open = body.find('(').ok_or_else(|| err(ln, "missing `(`".into()))?;
            // The first `)` after the `(`: one before it (`)(`) would make an inverted range.
            let close = body[open..].find(')').map(|c| open + c).ok_or_else(|| err(ln, "missing `)`".into()))?;
            let op_name = body[..open].trim();
            let args = body[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| ids.get(s).copied().ok_or_else(|| err(ln, format!("unknown value `{s}`"))))
                .collect::<Result<Vec<_>>>()?;
            let attrs_text = body[close + 1..].trim();
            let attrs = if attrs_text.is_empty() {
                Map::new()
            } else {
                match serde_json::from_str::<Value>(attrs_text) {
                    Ok(Value::Object(o)) => o,
                    Ok(_) => return Err(err(ln, "attributes must be a JSON object".into())),
                    Err(e) => return Err(err(ln, format!("attributes: {e}"))),
                }
            };
            let op = op_from_text(op_name, attrs).map_err(|e| err(ln, e))?;
            let id = g.try_add(op, &args)?;
            if g.shape(id) != Some(&ty) {
                return Err(err(
                    ln,
                    format!(
                        "annotated type {ty} but {op_name} infers {}",
                        g.shape(id).map(|s| s.to_string()).unwrap_or_default()
                    ),
                ));
            }
            if ids.insert(lhs.trim().to_string(), id).is_some() {
                return Err(err(ln, format!("value `{}` defined twice", lhs.trim())));
            }
        }
        if !done {
            return Err(err(text.lines().count(), "missing closing `}`".into()));
        }
        g.verify()?;
        Ok(g)
    }
}
