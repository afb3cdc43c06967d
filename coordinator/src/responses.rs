//! The three shapes of an answer every part of the control plane builds.
//!
//! Owns: [`ok`], [`ok_with`] and [`failure`]. Must never: hold anything
//! but the shape (what an answer says is its caller's).

use command::answer_code::AnswerCode;
use command::proto::{self, response_content::ContentType};

/// An OK answer with a message and no content.
pub fn ok(message: impl Into<String>) -> proto::Response {
    proto::Response {
        status: proto::ResponseStatus::Ok as i32,
        message: message.into(),
        error_code: String::new(),
        content: None,
    }
}

/// An OK answer carrying `content`.
pub fn ok_with(content: ContentType) -> proto::Response {
    proto::Response {
        content: Some(proto::ResponseContent {
            content_type: Some(content),
        }),
        ..ok("")
    }
}

/// A FAILURE answer with a stable code and a message.
pub fn failure(code: AnswerCode, message: impl Into<String>) -> proto::Response {
    proto::Response {
        status: proto::ResponseStatus::Failure as i32,
        message: message.into(),
        error_code: code.as_str().to_owned(),
        content: None,
    }
}
