//! The registry of MongoDB error codes Nidus can return.
//!
//! Numbers and names are MongoDB's (`src/mongo/base/error_codes.yml`); a code that MongoDB
//! raises from an assertion site without a registry entry is `ErrorCode::Location(n)`, whose
//! codeName is `Location<n>` exactly as MongoDB prints it.

macro_rules! error_codes {
    ($($name:ident = $num:expr),* $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($name,)*
            /// An assertion-site code (e.g. 16020) reported with codeName `Location16020`.
            Location(i32),
        }

        impl ErrorCode {
            pub fn code(self) -> i32 {
                match self {
                    $(ErrorCode::$name => $num,)*
                    ErrorCode::Location(n) => n,
                }
            }

            pub fn name(self) -> std::borrow::Cow<'static, str> {
                match self {
                    $(ErrorCode::$name => std::borrow::Cow::Borrowed(stringify!($name)),)*
                    ErrorCode::Location(n) => std::borrow::Cow::Owned(format!("Location{n}")),
                }
            }

            /// The registry entry for a number, or `Location(n)` when MongoDB has none.
            pub fn from_code(n: i32) -> ErrorCode {
                match n {
                    $($num => ErrorCode::$name,)*
                    other => ErrorCode::Location(other),
                }
            }

            /// Looks a code up by its registry name (as `configureFailPoint` data may use).
            pub fn from_name(name: &str) -> Option<ErrorCode> {
                match name {
                    $(stringify!($name) => Some(ErrorCode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    InternalError = 1,
    BadValue = 2,
    NoSuchKey = 4,
    GraphContainsCycle = 5,
    HostUnreachable = 6,
    HostNotFound = 7,
    UnknownError = 8,
    FailedToParse = 9,
    CannotMutateObject = 10,
    UserNotFound = 11,
    UnsupportedFormat = 12,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    ProtocolError = 17,
    AuthenticationFailed = 18,
    IllegalOperation = 20,
    EmptyArrayOperation = 21,
    InvalidBSON = 22,
    AlreadyInitialized = 23,
    LockTimeout = 24,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    NonExistentPath = 29,
    InvalidPath = 30,
    RoleNotFound = 31,
    FileRenameFailed = 37,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    LockBusy = 46,
    NoMatchingDocument = 47,
    NamespaceExists = 48,
    InvalidRoleModification = 49,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    InvalidDBRef = 55,
    EmptyFieldName = 56,
    DottedFieldName = 57,
    CommandNotFound = 59,
    WriteConcernTimeout = 64,
    MultipleErrorsOccurred = 65,
    ImmutableField = 66,
    CannotCreateIndex = 67,
    IndexAlreadyExists = 68,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    NodeNotFound = 74,
    NoReplicationEnabled = 76,
    UnknownReplWriteConcern = 79,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    NetworkTimeout = 89,
    ShutdownInProgress = 91,
    InvalidReplicaSetConfig = 93,
    NotYetInitialized = 94,
    NotSecondary = 95,
    OperationFailed = 96,
    UnsatisfiableWriteConcern = 100,
    NewReplicaSetConfigurationIncompatible = 103,
    NodeNotElectable = 104,
    ConfigurationInProgress = 109,
    WriteConflict = 112,
    CommandNotSupported = 115,
    DocTooLargeForCapped = 116,
    ConflictingOperationInProgress = 117,
    OplogStartMissing = 120,
    DocumentValidationFailure = 121,
    NotAReplicaSet = 123,
    CommandFailed = 125,
    FailedToSatisfyReadPreference = 133,
    CappedPositionLost = 136,
    CursorInUse = 143,
    ExceededMemoryLimit = 146,
    ZLibError = 147,
    DurationOverflow = 159,
    IncompatibleCollationVersion = 161,
    ViewDepthLimitExceeded = 165,
    CommandNotSupportedOnView = 166,
    OptionNotSupportedOnView = 167,
    InvalidPipelineOperator = 168,
    CannotIndexParallelArrays = 171,
    QueryPlanKilled = 175,
    AmbiguousIndexKeyPattern = 181,
    InvalidViewDefinition = 182,
    ClientMetadataMissingField = 183,
    ClientMetadataAppNameTooLarge = 184,
    ClientMetadataDocumentTooLarge = 185,
    ClientMetadataCannotBeMutated = 186,
    InvalidIndexSpecificationOption = 197,
    CannotBuildIndexKeys = 201,
    NoSuchSession = 206,
    InvalidUUID = 207,
    IllegalOpMsgFlag = 223,
    TransactionTooOld = 225,
    MaxSubPipelineDepthExceeded = 232,
    TooManyDocumentSequences = 233,
    CursorKilled = 237,
    SnapshotTooOld = 239,
    NotImplemented = 238,
    ConversionFailure = 241,
    CannotCreateCollection = 242,
    SnapshotUnavailable = 246,
    NoSuchTransaction = 251,
    TransactionCommitted = 256,
    TransactionTooLarge = 257,
    InvalidResumeToken = 260,
    TooManyLogicalSessions = 261,
    ExceededTimeLimit = 262,
    OperationNotSupportedInTransaction = 263,
    FailPointSetFailed = 266,
    PreparedTransactionInProgress = 267,
    IndexBuildAborted = 276,
    UnsatisfiableCommitQuorum = 278,
    ClientDisconnect = 279,
    ChangeStreamFatalError = 280,
    ChangeStreamHistoryLost = 286,
    ChecksumMismatch = 288,
    TransactionExceededLifetimeLimitSeconds = 290,
    NoQueryExecutionPlans = 291,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    CurrentConfigNotCommittedYet = 308,
    APIVersionError = 322,
    APIStrictError = 323,
    APIDeprecationError = 324,
    APIMismatchError = 325,
    MechanismUnavailable = 334,
    InvalidBSONType = 357,
    NonConformantBSON = 378,
    NotWritablePrimary = 10107,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    InterruptedAtShutdown = 11600,
    Interrupted = 11601,
    InterruptedDueToReplStateChange = 11602,
    BackgroundOperationInProgressForNamespace = 12587,
    DatabaseDifferCase = 13297,
    NotPrimaryNoSecondaryOk = 13435,
    NotPrimaryOrSecondary = 13436,
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn numbers_and_names_round_trip() {
        for code in [
            ErrorCode::WriteConflict,
            ErrorCode::DuplicateKey,
            ErrorCode::CommandNotFound,
        ] {
            assert_eq!(ErrorCode::from_code(code.code()), code);
            assert_eq!(ErrorCode::from_name(&code.name()), Some(code));
        }
        assert_eq!(ErrorCode::WriteConflict.code(), 112);
        assert_eq!(ErrorCode::CommandNotFound.name(), "CommandNotFound");
    }

    #[test]
    fn unregistered_codes_are_location_codes() {
        let c = ErrorCode::from_code(16020);
        assert_eq!(c, ErrorCode::Location(16020));
        assert_eq!(c.name(), "Location16020");
        assert_eq!(c.code(), 16020);
    }
}
