//! Volcengine web search as 0.3.5 calls it: `timeRange`, `authLevel` and `queryRewrite`
//! checked and sent as `TimeRange`, `Filter.AuthInfoLevel` and `QueryControl`, the answer's
//! fields read in either casing, its `ResponseMetadata.Error` reported.

use reqwest::StatusCode;
use reqwest::header::AUTHORIZATION;
use serde_json::{Map, Value, json};

use super::{Call, first, json_body, send, status_text, text, truthy};
use crate::web::search_providers::Hit;

/// Returns Volcengine's `TimeRange`: a named range or `YYYY-MM-DD..YYYY-MM-DD`.
fn time_range(value: Option<&Value>) -> Result<Option<String>, String> {
    let Some(value) = value.filter(|v| truthy(v)) else {
        return Ok(None);
    };
    let range = match value {
        Value::String(s) => s.trim().to_string(),
        Value::Bool(true) => "True".into(),
        other => other.to_string(),
    };
    if range.is_empty() {
        return Ok(None);
    }
    let named = ["OneDay", "OneWeek", "OneMonth", "OneYear"].contains(&range.as_str());
    let is_date = |s: &str| {
        let b = s.as_bytes();
        b.len() == 10
            && b.iter().enumerate().all(|(i, c)| match i {
                4 | 7 => *c == b'-',
                _ => c.is_ascii_digit(),
            })
    };
    let dates = range
        .split_once("..")
        .is_some_and(|(from, to)| is_date(from) && is_date(to));
    if named || dates {
        return Ok(Some(range));
    }
    Err(
        "Error: timeRange must be OneDay, OneWeek, OneMonth, OneYear, or YYYY-MM-DD..YYYY-MM-DD"
            .into(),
    )
}

/// Returns Volcengine's `AuthInfoLevel` (0 or 1; Python's `int()` of what was given).
fn auth_level(value: Option<&Value>) -> Result<Option<i64>, String> {
    let invalid = || "Error: authLevel must be 0 or 1".to_string();
    let level = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Bool(b)) => i64::from(*b),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .ok_or_else(invalid)?,
        Some(Value::String(s)) => s.trim().parse().map_err(|_| invalid())?,
        Some(_) => return Err(invalid()),
    };
    if level == 0 || level == 1 {
        Ok(Some(level))
    } else {
        Err(invalid())
    }
}

/// Returns the first of `names` given in `args` (0.3.5 reads camelCase, then snake_case).
fn arg<'a>(args: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| args.get(*n))
}

/// Volcengine: `POST {Query, SearchType, Count, NeedSummary[, TimeRange, Filter,
/// QueryControl]}`, results in `(Result.)WebResults[]`, errors in `ResponseMetadata.Error`.
pub(super) async fn search(call: &Call<'_>, args: &Map<String, Value>) -> Result<Vec<Hit>, String> {
    let range = time_range(arg(args, &["timeRange", "time_range"]))?;
    let level = auth_level(arg(args, &["authLevel", "auth_level"]))?;
    let rewrite = arg(args, &["queryRewrite", "query_rewrite"]).is_some_and(truthy);
    let mut body =
        json!({"Query": call.query, "SearchType": "web", "Count": call.n, "NeedSummary": true});
    if let Some(range) = range {
        body["TimeRange"] = json!(range);
    }
    if let Some(level) = level {
        body["Filter"] = json!({"AuthInfoLevel": level});
    }
    if rewrite {
        body["QueryControl"] = json!({"QueryRewrite": true});
    }
    let request = call
        .client
        .post(&call.endpoints.volcengine)
        .header(AUTHORIZATION, format!("Bearer {}", call.api_key))
        .header("X-Traffic-Tag", "nanobot")
        .json(&body);
    let failed = |e: String| format!("Error: Volcengine search failed: {e}");
    let response = match send(request).await.map_err(failed)? {
        Ok(response) => response,
        Err(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
            return Err("Error: Volcengine search rate limited. Try again later or reduce search frequency.".into());
        }
        Err(response) => {
            let code = response.status().as_u16();
            return Err(format!(
                "Error: Volcengine search failed ({code}): {}",
                status_text(&response)
            ));
        }
    };
    let data = json_body(response).await.map_err(failed)?;
    volcengine_hits(&data)
}

/// Reads Volcengine's answer (either casing of each field, as 0.3.5).
fn volcengine_hits(data: &Value) -> Result<Vec<Hit>, String> {
    let metadata = data.get("ResponseMetadata").filter(|m| truthy(m));
    let error = metadata
        .and_then(|m| first(m, &["Error"]))
        .or_else(|| first(data, &["Error", "error"]));
    if let Some(error) = error {
        if error.is_object() {
            let code = first(error, &["Code", "code"]).map_or("unknown".into(), |c| text(Some(c)));
            let message = text(first(error, &["Message", "message"]).or(Some(error)));
            return Err(format!("Error: Volcengine search error {code}: {message}"));
        }
        return Err(format!(
            "Error: Volcengine search error: {}",
            text(Some(error))
        ));
    }
    let result = first(data, &["Result"]).unwrap_or(data);
    let items = first(result, &["WebResults", "webResults", "results"]).and_then(Value::as_array);
    let hit = |item: &Value| {
        let meta: Vec<String> = [
            &["SiteName", "siteName", "Site"][..],
            &["AuthInfoDes", "authInfoDes"],
            &["PublishTime", "publishTime"],
        ]
        .iter()
        .filter_map(|keys| first(item, keys).map(|v| text(Some(v))))
        .collect();
        let summary = text(first(
            item,
            &[
                "Summary", "summary", "Snippet", "snippet", "Content", "content",
            ],
        ));
        let content: Vec<String> = [meta.join(" | "), summary]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        Hit {
            title: text(first(item, &["Title", "title"])),
            url: text(first(item, &["Url", "URL", "url"])),
            content: content.join("\n"),
        }
    };
    let items = items.map(|i| i.iter().filter(|v| v.is_object()).map(hit).collect());
    Ok(items.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volcengine_filters_are_normalised_as_0_3_5() {
        assert_eq!(
            time_range(Some(&json!(" OneWeek "))).unwrap().as_deref(),
            Some("OneWeek")
        );
        assert_eq!(
            time_range(Some(&json!("2024-01-01..2024-12-31")))
                .unwrap()
                .as_deref(),
            Some("2024-01-01..2024-12-31")
        );
        assert_eq!(time_range(Some(&json!(""))).unwrap(), None);
        assert_eq!(time_range(None).unwrap(), None);
        for bad in [json!("上周"), json!("2024-1-1..2024-12-31"), json!(7)] {
            assert_eq!(
                time_range(Some(&bad)).unwrap_err(),
                "Error: timeRange must be OneDay, OneWeek, OneMonth, OneYear, or YYYY-MM-DD..YYYY-MM-DD"
            );
        }
        assert_eq!(auth_level(Some(&json!("1"))).unwrap(), Some(1));
        assert_eq!(auth_level(Some(&json!(0))).unwrap(), Some(0));
        assert_eq!(auth_level(Some(&json!(true))).unwrap(), Some(1));
        assert_eq!(auth_level(None).unwrap(), None);
        for bad in [json!(2), json!("一"), json!([1])] {
            assert_eq!(
                auth_level(Some(&bad)).unwrap_err(),
                "Error: authLevel must be 0 or 1"
            );
        }
    }

    #[test]
    fn volcengine_errors_and_fields_are_read_in_either_casing() {
        let coded =
            json!({"ResponseMetadata": {"Error": {"Code": "InvalidKey", "Message": "密钥无效"}}});
        assert_eq!(
            volcengine_hits(&coded).unwrap_err(),
            "Error: Volcengine search error InvalidKey: 密钥无效"
        );
        assert_eq!(
            volcengine_hits(&json!({"error": "配额用尽"})).unwrap_err(),
            "Error: Volcengine search error: 配额用尽"
        );
        let lower = json!({"results": [{"title": "标题", "url": "https://x.cn/", "snippet": "摘要"}, "junk"]});
        assert_eq!(
            volcengine_hits(&lower).unwrap(),
            [Hit {
                title: "标题".into(),
                url: "https://x.cn/".into(),
                content: "摘要".into()
            }]
        );
    }
}
