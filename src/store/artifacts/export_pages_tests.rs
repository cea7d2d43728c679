use super::*;

#[test]
fn copy_text_rows_decode() {
    let mut page = CopyPage::default();
    let row = b"c\\\\1\tm1\tuser\t{\"conversationId\":\"c\"}\t\"a\\\\\"b\\tc\\nd\"\t\\N\tcall\t\\N\t7\t1700\n";
    page.feed(&row[..20]).unwrap();
    assert!(page.rows.is_empty() && !page.partial.is_empty());
    page.feed(&row[20..]).unwrap();
    assert!(page.partial.is_empty());
    let page = page.take_page(StoredPage::default()).unwrap();
    let r = page.rows().next().unwrap();
    assert_eq!(r.conversation_id, "c\\1");
    assert_eq!(r.columns.content, "\"a\\\"b\tc\nd\"");
    assert_eq!((r.columns.name, r.columns.tool_call_id, r.columns.metadata), (None, Some("call"), None));
    assert_eq!((r.sequence, r.columns.created_at_ms), (7, 1700));
    // One row per message (the usual case), and malformed rows.
    let mut whole = CopyPage::default();
    whole.feed(row).unwrap();
    whole.feed(b"c\tm2\tuser\t{}\t1\t\\N\t\\N\t\\N\t8\t9\n").unwrap();
    let whole = whole.take_page(StoredPage::default()).unwrap();
    assert_eq!(whole.len(), 2);
    assert_eq!(whole.last_position(), Some(("c".to_string(), 8)));
    for broken in [
        &b"c\tm\tuser\t{}\t1\t\\N\t\\N\t\\N\t8\n"[..],
        b"c\tm\tu\t{}\t1\t\\N\t\\N\t\\N\t8\t9\t10\n",
        b"c\tm\tu\t{}\t1\t\\N\t\\N\t\\N\t\\N\t9\n",
    ] {
        assert!(CopyPage::default().feed(broken).is_err(), "{:?}", String::from_utf8_lossy(broken));
    }
    let mut out = Vec::new();
    unescape_into(&mut out, b"\\101\\x42\\b\\z");
    assert_eq!(out, b"AB\x08z");
}

/// A page handed back is emptied and the next page is read into its buffers.
#[test]
fn spare_pages_are_filled_again() {
    const MARK: usize = 1 << 16;
    let row = b"c\tm1\tuser\t{}\t1\t\\N\t\\N\t\\N\t1\t2\n";
    let mut builder = CopyPage::default();
    builder.feed(row).unwrap();
    let mut used = builder.take_page(StoredPage::default()).unwrap();
    used.text.reserve_exact(MARK);
    let spares = SparePages::default();
    spares.give(used);
    let spare = empty_page(&spares);
    assert!(spare.is_empty() && spare.text.is_empty(), "handed back empty");
    assert!(spare.text.capacity() >= MARK, "with its buffer");
    builder.feed(row).unwrap();
    let page = builder.take_page(spare).unwrap();
    assert_eq!(page.len(), 1);
    builder.feed(row).unwrap();
    assert!(builder.text.capacity() >= MARK, "the next page is read into the spare's buffer");
    assert!(spares.take().is_none(), "nothing else was kept");
}
