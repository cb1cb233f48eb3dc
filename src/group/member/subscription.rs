//! What a member subscribes to: topic names, or a pattern matched against the names the
//! metadata shows. Sans-IO.

use std::collections::BTreeSet;
use std::fmt;

use crate::error::Error;

/// What the member subscribes to.
#[derive(Debug, Clone)]
pub(crate) enum Subscription {
    /// These topics (never empty).
    Topics(BTreeSet<String>),
    /// Every topic whose whole name matches the pattern, internal topics left out.
    Pattern(TopicPattern),
}

impl Subscription {
    /// The subscribed topics among `known` (every known topic name of the cluster).
    pub fn topics<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        match self {
            Subscription::Topics(t) => t.clone(),
            Subscription::Pattern(p) => known
                .into_iter()
                .filter(|t| p.matches(t))
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// A topic pattern matched against whole topic names, as the Java client's
/// `Pattern.matcher(topic).matches()` does.
#[derive(Clone)]
pub(crate) struct TopicPattern {
    source: String,
    #[cfg(feature = "regex")]
    regex: regex_lite::Regex,
}

impl TopicPattern {
    /// Compiles `pattern`.
    ///
    /// # Errors
    /// A config error naming the pattern when it is not a valid regular expression (or
    /// the `regex` feature is off).
    pub fn new(pattern: &str) -> Result<TopicPattern, Error> {
        #[cfg(feature = "regex")]
        {
            let anchored = format!("^(?:{pattern})$");
            regex_lite::Regex::new(&anchored)
                .map(|regex| TopicPattern {
                    source: pattern.to_owned(),
                    regex,
                })
                .map_err(|e| Error::config(format!("invalid topic pattern {pattern:?}: {e}")))
        }
        #[cfg(not(feature = "regex"))]
        {
            Err(Error::config(format!(
                "topic pattern {pattern:?}: subscribing by pattern needs the `regex` feature"
            )))
        }
    }

    /// The pattern as the application gave it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the whole of `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        #[cfg(feature = "regex")]
        {
            self.regex.is_match(topic)
        }
        #[cfg(not(feature = "regex"))]
        {
            let _ = topic;
            false
        }
    }
}

impl fmt::Debug for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicPattern({:?})", self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "regex")]
    #[test]
    fn a_pattern_matches_whole_names_only() {
        let p = TopicPattern::new("orders-.*").unwrap();
        assert!(p.matches("orders-eu"));
        assert!(!p.matches("old-orders-eu"));
        let p = TopicPattern::new("a|b").unwrap();
        assert!(p.matches("a") && p.matches("b") && !p.matches("ab"));
        let sub = Subscription::Pattern(TopicPattern::new("t[0-9]").unwrap());
        let got = sub.topics(["t1", "t22", "x", "t3"]);
        assert_eq!(got.into_iter().collect::<Vec<_>>(), ["t1", "t3"]);
    }

    #[cfg(feature = "regex")]
    #[test]
    fn an_invalid_pattern_is_a_config_error_naming_it() {
        let e = TopicPattern::new("orders-(").unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Config);
        assert!(e.to_string().contains("orders-("), "{e}");
    }
}
