//! Typed ids of graph entities.
//!
//! A [`Value`] is a `u32` index into the graph's node arena, printed as the text
//! format writes it (`v7`), so messages, dumps and `.kiln` files agree on names.
//! Each node has one result, so a node and its value share one id.

use cranelift_entity::entity_impl;

/// The result of a graph node, and the node itself.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");
