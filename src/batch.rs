//! Batch planning: which messages run together and in what order.
//!
//! Pure. Messages of one ordering key form one group, ordered by send timestamp then batch position;
//! every unkeyed message is a group of its own. Groups run concurrently, a group's members in order;
//! when more groups are ready than run at once, the most urgent start first (design §12). A group's
//! urgency is its most urgent member's: per-key order always wins over priority.

use std::collections::BTreeMap;

/// What planning needs of a message. Items are given in batch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item<'a, M = usize> {
    /// What its group lists for it: its position in the delivered batch, or that and what was
    /// read from it.
    pub member: M,
    /// The queue's send timestamp, milliseconds.
    pub timestamp_ms: i64,
    /// The ordering key, if any.
    pub key: Option<&'a str>,
    /// 0 most urgent .. 9.
    pub priority: u8,
}

/// One unit of work: a key's messages in order, or a single unkeyed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group<'a, M = usize> {
    /// The ordering key; `None` for an unkeyed message.
    pub key: Option<&'a str>,
    /// Its items' members, in the order they must run.
    pub members: Vec<M>,
    /// The most urgent member's priority.
    pub priority: u8,
}

/// Groups items by key and orders each group. Groups come most urgent first; among equals keyed
/// groups come first, in key order, so the plan is deterministic, then unkeyed ones in batch order.
/// A key's items run by send timestamp, then batch order.
pub fn plan<'a, M: Clone>(items: &[Item<'a, M>]) -> Vec<Group<'a, M>> {
    // Planned by position, then each position's member put in: the grouping's maps exist once in
    // the worker, not once per kind of member.
    let by_position: Vec<Item<'a>> = items
        .iter()
        .enumerate()
        .map(|(member, i)| Item { member, timestamp_ms: i.timestamp_ms, key: i.key, priority: i.priority })
        .collect();
    plan_positions(&by_position)
        .into_iter()
        .map(|g| Group { key: g.key, members: g.members.iter().map(|&p| items[p].member.clone()).collect(), priority: g.priority })
        .collect()
}

/// [`plan`] of items whose members are their positions in `items`.
fn plan_positions<'a>(items: &[Item<'a>]) -> Vec<Group<'a>> {
    let mut keyed: BTreeMap<&'a str, Vec<&Item<'a>>> = BTreeMap::new();
    let mut unkeyed = Vec::new();
    for item in items {
        match item.key {
            Some(k) => keyed.entry(k).or_default().push(item),
            None => unkeyed.push(Group { key: None, members: vec![item.member], priority: item.priority }),
        }
    }
    let mut groups: Vec<Group<'a>> = keyed
        .into_iter()
        .map(|(k, mut members)| {
            members.sort_by_key(|m| (m.timestamp_ms, m.member));
            let priority = members.iter().map(|m| m.priority).min().unwrap_or(u8::MAX);
            Group { key: Some(k), members: members.iter().map(|m| m.member).collect(), priority }
        })
        .collect();
    groups.extend(unkeyed);
    // Stable: equal priorities keep the order above.
    groups.sort_by_key(|g| g.priority);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(member: usize, timestamp_ms: i64, key: Option<&str>) -> Item<'_> {
        Item { member, timestamp_ms, key, priority: 5 }
    }

    #[test]
    fn the_most_urgent_groups_come_first_and_a_key_keeps_its_order() {
        let items = [
            Item { member: 0, timestamp_ms: 0, key: None, priority: 5 },
            Item { member: 1, timestamp_ms: 0, key: Some("b"), priority: 5 },
            Item { member: 2, timestamp_ms: 1, key: Some("b"), priority: 0 },
            Item { member: 3, timestamp_ms: 0, key: None, priority: 1 },
            Item { member: 4, timestamp_ms: 0, key: Some("a"), priority: 9 },
        ];
        let plan = plan(&items);
        let order: Vec<(Option<&str>, Vec<usize>)> = plan.iter().map(|g| (g.key, g.members.clone())).collect();
        assert_eq!(
            order,
            vec![(Some("b"), vec![1, 2]), (None, vec![3]), (None, vec![0]), (Some("a"), vec![4])],
            "b's urgent job lifts its key, but runs after b's earlier job"
        );
    }

    #[test]
    fn a_keys_messages_form_one_group_in_timestamp_order() {
        let items = [item(0, 30, Some("a")), item(1, 10, Some("a")), item(2, 20, Some("a"))];
        assert_eq!(plan(&items), vec![Group { key: Some("a"), members: vec![1, 2, 0], priority: 5 }]);
    }

    #[test]
    fn equal_timestamps_keep_batch_order() {
        let items = [item(0, 5, Some("a")), item(1, 5, Some("a")), item(2, 1, Some("a")), item(3, 5, Some("a"))];
        assert_eq!(plan(&items)[0].members, vec![2, 0, 1, 3]);
    }

    #[test]
    fn keys_are_separate_and_unkeyed_messages_stand_alone() {
        let items =
            [item(0, 1, None), item(1, 2, Some("b")), item(2, 3, Some("a")), item(3, 4, None), item(4, 5, Some("b"))];
        assert_eq!(
            plan(&items),
            vec![
                Group { key: Some("a"), members: vec![2], priority: 5 },
                Group { key: Some("b"), members: vec![1, 4], priority: 5 },
                Group { key: None, members: vec![0], priority: 5 },
                Group { key: None, members: vec![3], priority: 5 },
            ]
        );
    }

    #[test]
    fn every_item_is_planned_exactly_once() {
        let keys = ["x", "y", "z"];
        let items: Vec<Item> =
            (0..50).map(|i| item(i, (i * 7 % 13) as i64, if i % 4 == 0 { None } else { Some(keys[i % 3]) })).collect();
        let mut seen: Vec<usize> = plan(&items).into_iter().flat_map(|g| g.members).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_batch_plans_nothing() {
        assert!(plan::<usize>(&[]).is_empty());
    }
}
