//! Operators of this family (being written).
