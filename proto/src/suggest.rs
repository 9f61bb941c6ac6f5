//! "Did you mean": the candidate closest to a word that is not known, for every error message
//! that names an unknown key, agent, field or trigger — one rule everywhere: the most similar
//! candidate by Jaro–Winkler above 0.8 (which favours a shared start), else the shortest one the
//! word begins (`gh` → `gh-issues`).

/// The candidate closest to `word`, if one is close enough to be a likely typo.
pub fn closest<'a, S: AsRef<str>>(word: &str, candidates: &'a [S]) -> Option<&'a str> {
    let similar = candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c.as_ref()), c.as_ref()))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c);
    similar.or_else(|| {
        candidates
            .iter()
            .map(AsRef::as_ref)
            .filter(|c| word.chars().count() >= 2 && c.starts_with(word))
            .min_by_key(|c| c.len())
    })
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_typo_or_a_prefix_finds_its_word_and_a_stranger_finds_none() {
        let known = ["gh-issues", "nightly-report"];
        assert_eq!(closest("nightly-reprot", &known), Some("nightly-report"));
        assert_eq!(closest("gh", &known), Some("gh-issues"));
        assert_eq!(closest("weekly", &known), None);
        let owned = vec!["title".to_string()];
        assert_eq!(closest("titel", &owned), Some("title"));
        assert_eq!(closest::<&str>("x", &[]), None);
    }
}
