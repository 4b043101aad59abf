//! Geospatial values for `2dsphere` indexes and the geo query operators: GeoJSON and legacy
//! coordinate pairs ([`shape`]), unit-sphere primitives ([`sphere`]), S2 cell ids
//! ([`cell`]) and cell coverings ([`cover`]); `2d` indexes' flat GeoHash grid ([`flat`]).

pub mod cell;
pub mod cover;
pub mod flat;
pub mod shape;
pub mod sphere;

/// MongoDB's earth radius for distances in meters (`kRadiusOfEarthInMeters`).
pub const RADIUS_OF_EARTH_METERS: f64 = 6378.1 * 1000.0;
