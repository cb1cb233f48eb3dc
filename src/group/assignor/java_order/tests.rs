//! The emulated iteration orders against what Java 17+ printed for the same keys (see the
//! expected values: `java.util.HashMap<String, _>` and `HashSet<TopicPartition>`).

use super::*;

fn string_order(keys: &[&str]) -> Vec<String> {
    HashOrder::of(
        keys.iter()
            .enumerate()
            .map(|(i, k)| (i as u64, string_hash(k))),
    )
    .into_iter()
    .map(|i| keys[i as usize].to_owned())
    .collect()
}

fn partition_order(topic: &str, order: &HashOrder) -> Vec<i32> {
    let _ = topic;
    order.iter().map(|p| p as i32).collect()
}

#[test]
fn string_hashes_are_javas() {
    assert_eq!(string_hash(""), 0);
    assert_eq!(string_hash("a"), 97);
    assert_eq!(string_hash("Aa"), string_hash("BB"));
    // Over UTF-16 code units: U+1F600 is the pair D83D DE00.
    assert_eq!(
        string_hash("\u{1F600}"),
        0xD83D * 31 + 0xDE00,
        "surrogate pairs"
    );
    assert_eq!(
        string_hash("consumer-1"),
        "consumer-1"
            .chars()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
    );
}

#[test]
fn a_hash_map_of_member_ids_iterates_as_javas() {
    let ids = [
        "consumer-b-2",
        "consumer-a-1",
        "Consumer-z",
        "c-06ed-3",
        "Consumer-cfcd-0",
        "\u{1F600}x",
        "\u{FFFD}x",
        "m1",
        "m2",
        "m3",
        "m10",
        "m11",
        "m12",
        "m13",
        "zzz",
    ];
    // 15 keys: the table grew from 16 to 32.
    assert_eq!(
        string_order(&ids),
        [
            "consumer-a-1",
            "\u{FFFD}x",
            "m1",
            "m2",
            "m3",
            "c-06ed-3",
            "Consumer-z",
            "Consumer-cfcd-0",
            "m11",
            "m10",
            "m13",
            "m12",
            "\u{1F600}x",
            "zzz",
            "consumer-b-2"
        ]
    );
}

#[test]
fn keys_of_one_bucket_keep_their_insertion_order() {
    // "Aa", "BB" (and the four-letter ones) share a hash code.
    assert_eq!(
        string_order(&["Aa", "BB", "x", "AaAa", "BBBB", "AaBB", "BBAa"]),
        ["Aa", "BB", "x", "AaAa", "BBBB", "AaBB", "BBAa"]
    );
    assert_eq!(string_order(&["BB", "Aa"]), ["BB", "Aa"]);
}

#[test]
fn a_hash_set_of_partitions_iterates_as_javas_after_removals_and_growth() {
    let topic = string_hash("orders");
    let mut set = HashOrder::default();
    for p in [40, 3, 19, 0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 5] {
        set.insert(p as u64, topic_partition_hash(topic, p));
    }
    set.remove(3);
    set.insert(3, topic_partition_hash(topic, 3));
    assert_eq!(
        partition_order("orders", &set),
        [40, 16, 48, 80, 112, 144, 19, 0, 32, 64, 96, 128, 3, 5]
    );
    assert_eq!(set.first(), Some(40));
}

#[test]
fn a_ninth_key_in_one_bucket_of_a_small_table_doubles_it() {
    let topic = string_hash("t");
    let mut set = HashOrder::default();
    for p in (0..9).map(|k| 1 + 16 * k).chain([2]) {
        set.insert(p as u64, topic_partition_hash(topic, p));
    }
    assert_eq!(
        partition_order("t", &set),
        [17, 49, 81, 113, 2, 1, 33, 65, 97, 129]
    );
}
