//! Pure BSON layers: MongoDB's value order (binary or under an ICU collation), dotted paths
//! over arrays, index key generation and the order-preserving keystring encoding.

// `nidus_common::Error` carries MongoDB reply fields; it is returned by value everywhere.

pub mod collation;
pub mod compare;
pub mod geo;
pub mod hashed;
pub mod keys;
pub mod keystring;
pub mod number;
pub mod path;
pub mod text;
