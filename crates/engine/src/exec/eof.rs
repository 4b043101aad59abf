use super::{StageImpl, StageState};
use nidus_common::Result;

/// The plan of a query on a collection that does not exist.
pub struct Eof;

impl StageImpl for Eof {
    fn name(&self) -> &'static str {
        "EOF"
    }

    fn work(&mut self) -> Result<StageState> {
        Ok(StageState::IsEof)
    }
}
